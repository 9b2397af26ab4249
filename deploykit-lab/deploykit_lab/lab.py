"""`deploykit lab up|down|status`: bring the whole lab up, take every trace of it down."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import socket
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deploy_kit.project import inventories_dir
from deploykit_lab import ceph, hosts, image, serving, upstream
from deploykit_lab.consul import ensure_consul
from deploykit_lab.coredns import ensure_coredns
from deploykit_lab.inventory import write_inventory
from deploykit_lab.layout import (
    CEPH_DIR,
    CONTROLLER_PACKAGES,
    HOSTS_DIR,
    LAB_DIR,
    LOCK_FILE,
    STATE_FILE,
    LabHost,
    lab_hosts,
    repo_path,
    rootfs_path,
)
from deploykit_lab.profiles import DEFAULT, VAULT_PASSWORD, Profile, profile, vault_password
from deploykit_lab.system import ensure_packages, log, quiet, require_root


@dataclass
class Step:
    name: str
    seconds: float


def lab_inventory_dir() -> Path:
    """inventory/lab of this checkout, or ./inventory/lab beside an installed deploykit's
    ./runs: where `--inventory lab` finds it."""
    return inventories_dir() / "lab"


def _state() -> dict[str, Any]:
    if STATE_FILE.exists():
        data: dict[str, Any] = json.loads(STATE_FILE.read_text())
        return data
    return {}


def _save(state: dict[str, Any]) -> None:
    LAB_DIR.mkdir(parents=True, exist_ok=True)
    STATE_FILE.write_text(json.dumps(state, indent=2))


def is_up() -> bool:
    state = _state()
    if not state.get("hosts"):
        return False
    for h in state["hosts"]:
        try:
            socket.create_connection((h["address"], 22), timeout=1).close()
        except OSError:
            return False
    return True


def _timer(steps: list[Step], report: Any) -> Callable[..., Any]:
    """A `timed(name, fn, *args)` that reports the step and appends its seconds to steps."""

    def timed(name: str, fn: Any, *args: Any) -> Any:
        report(f"… {name}")
        start = time.monotonic()
        value = fn(*args)
        steps.append(Step(name, time.monotonic() - start))
        return value

    return timed


def prefetch(chosen: Profile, report: Any = print) -> list[Step]:
    """Fill the caches a lab up needs, without starting anything: controller packages, the
    host image, CoreDNS and Consul, and (serving profiles) the wheelhouse, the model and the
    router's wheels.
    The Go builds are CPU-bound and the rest is mostly download and disk, so the builds run
    in a thread beside the rest; each artefact is built under its own lock, so a prefetch in
    the background and a `lab up` (or a test that needs a binary) never build one twice."""
    steps: list[Step] = []
    timed = _timer(steps, report)

    def binaries() -> None:
        timed("CoreDNS binary", ensure_coredns)
        timed("Consul binary (first build about 5–11 min on 2 cores)", ensure_consul)

    with ThreadPoolExecutor(max_workers=1) as pool:
        builds = pool.submit(binaries)
        timed("controller packages", ensure_packages, CONTROLLER_PACKAGES)
        timed("host image and offline repo", image.ensure_image)
        if chosen.serving:
            timed("serving wheelhouse and model (first time about 1–3 min)",
                  serving.ensure_serving)
            timed(f"router wheels (vllm-router {serving.ROUTER_VERSION})",
                  serving.ensure_router_wheels)
        builds.result()  # re-raises a failed build here
    return steps


def up(count: int, report: Any = print, chosen: Profile | None = None) -> list[Step]:
    """Bring the lab up with a profile's settings and write inventory/lab/ for this checkout.
    A lab that is already up (perhaps from another checkout) is left running and only the
    inventory is written again, so the `deploykit up --inventory lab` after it works."""
    require_root()
    with _exclusive(report):
        return _up(count, report, chosen or profile(DEFAULT))


def _up(count: int, report: Any, chosen: Profile) -> list[Step]:
    if is_up():
        running = _state()
        # this checkout's binaries: its CoreDNS plugin list may differ from the one the
        # running lab was started with (each build is cached under its own name)
        ensure_coredns()
        ensure_consul()
        _write_inventory(running, chosen, report)
        report(f"lab is already up (profile {running.get('profile', DEFAULT)} when started); "
               f"inventory written for profile {chosen.name}")
        running["profile"] = chosen.name
        _save(running)
        return []
    if _state():
        _down(report=lambda _m: None)
    steps = prefetch(chosen, report)
    timed = _timer(steps, report)
    rootfs, repo, _ = image.ensure_image()
    state: dict[str, Any] = {"hosts": [], "ceph": {}, "profile": chosen.name, "count": count}
    _save(state)
    timed("lab bridge", hosts.ensure_bridge)
    state["ceph"] = timed("Ceph mon, mgr and OSD", ceph.bootstrap)
    _save(state)
    state["upstream_pid"] = timed("upstream resolver", upstream.start)
    _save(state)
    key = hosts.ensure_ssh_key()
    public = key.with_suffix(".pub").read_text()
    lab = lab_hosts(count)
    for host in lab:
        pid = hosts.start_host(host, rootfs, repo, public)
        state["hosts"].append({"name": host.name, "index": host.index,
                               "address": host.address, "pid": pid})
        _save(state)
    timed(f"{count} hosts answering SSH", hosts.wait_ssh, lab)
    _write_inventory(state, chosen, report)
    return steps


def _write_inventory(state: dict[str, Any], chosen: Profile, report: Any) -> None:
    count = int(state.get("count") or len(state["hosts"]))
    vault_password()  # every profile has a vault: the generated secrets are encrypted
    artefacts = serving.ensure_serving() if chosen.serving else None  # cached: instant
    if artefacts is not None:
        report(f"lab model: {artefacts.model_variant} ({artefacts.model_why}): "
               f"{artefacts.model}")
    write_inventory(lab_inventory_dir(), lab_hosts(count), state["ceph"],
                    hosts.ensure_ssh_key(), artefacts, chosen)


@contextlib.contextmanager
def _exclusive(report: Any) -> Iterator[None]:
    """`lab up` and `lab down` one at a time on this machine: two of them started a minute
    apart once left two hosts' systemd orphaned (their nspawn gone, their services running).
    The lock file lives outside LAB_DIR, which `down` removes."""
    LOCK_FILE.parent.mkdir(parents=True, exist_ok=True)
    with LOCK_FILE.open("a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            report(f"… waiting for another lab up/down ({handle.read().strip() or 'pid ?'})")
            fcntl.flock(handle, fcntl.LOCK_EX)
        handle.truncate(0)
        handle.write(f"pid {os.getpid()}\n")
        handle.flush()
        try:
            yield
        finally:
            handle.truncate(0)


def down(report: Any = print) -> None:
    """Remove everything `up` made; safe to run twice and after a half-failed or
    interrupted up."""
    require_root()
    with _exclusive(report):
        _down(report)


def _down(report: Any) -> None:
    state = _state()
    known = {h["name"]: h for h in state.get("hosts", [])}
    # hosts a lost or half-written state file does not name: their directories, and any
    # cgroup or network namespace of the lab's naming still there
    found = {p.name for p in HOSTS_DIR.glob("lab*")} if HOSTS_DIR.exists() else set()
    found |= hosts.lab_cgroup_names() | hosts.lab_netns_names()
    for name in sorted(found):
        if name[3:].isdigit():
            known.setdefault(name, {"name": name, "index": int(name[3:]), "pid": None})
    report(f"… stopping {', '.join(known) or 'no host'}")
    hosts.stop_hosts([(LabHost(entry["name"], int(entry["index"])), entry.get("pid"))
                      for entry in known.values()])
    for name, pid in state.get("ceph", {}).get("pids", {}).items():
        _kill(int(pid), name)
    if state.get("upstream_pid"):
        _kill(int(state["upstream_pid"]), "upstream resolver")
    _kill_strays()
    hosts.remove_bridge()
    if os.path.ismount(CEPH_DIR):
        quiet(["umount", "-l", str(CEPH_DIR)])
    shutil.rmtree(LAB_DIR, ignore_errors=True)
    shutil.rmtree(lab_inventory_dir(), ignore_errors=True)
    report("lab is down")


def _kill(pid: int, name: str) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.3)
    log(f"{name} ({pid}) ignored SIGTERM; killing")
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def _kill_strays() -> None:
    """Processes whose command line points into the lab directory (a lost state file)."""
    marker = str(LAB_DIR).encode()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            if marker in (proc / "cmdline").read_bytes():
                os.kill(int(proc.name), signal.SIGKILL)
        except (OSError, ProcessLookupError):
            continue


def status() -> dict[str, Any]:
    state = _state()
    out: dict[str, Any] = {"up": is_up(), "profile": state.get("profile"), "hosts": []}
    for h in state.get("hosts", []):
        try:
            socket.create_connection((h["address"], 22), timeout=1).close()
            ok = True
        except OSError:
            ok = False
        out["hosts"].append({"name": h["name"], "address": h["address"], "ssh": ok})
    out["ceph_pids"] = state.get("ceph", {}).get("pids", {})
    # what every deploykit run on the lab passes (--vault-password-file, or
    # ANSIBLE_VAULT_PASSWORD_FILE): outside the inventory, as a CI secret is
    out["vault_password_file"] = str(VAULT_PASSWORD)
    return out


def stop_host(name: str) -> None:
    """Take one lab host down as a whole (orderly poweroff of its container), keeping its
    disk: `start_host` boots it again with everything deployed on it (failover tests)."""
    state = _state()
    entry = next(h for h in state["hosts"] if h["name"] == name)
    hosts.stop_host(LabHost(entry["name"], int(entry["index"])), entry.get("pid"))
    entry["pid"] = None
    _save(state)


def crash_host(name: str) -> None:
    """Like a power cut: SIGKILL every process of the host's container at once (nothing
    shuts down cleanly, Consul's agent does not leave), then remove what stop_host removes."""
    state = _state()
    entry = next(h for h in state["hosts"] if h["name"] == name)
    host = LabHost(entry["name"], int(entry["index"]))
    hosts.kill_tree(hosts.cgroup_dirs(host))
    hosts.stop_host(host, None)
    entry["pid"] = None
    _save(state)


def start_host(name: str) -> None:
    state = _state()
    entry = next(h for h in state["hosts"] if h["name"] == name)
    host = LabHost(entry["name"], int(entry["index"]))
    rootfs, repo = rootfs_path(), repo_path()
    public = hosts.ensure_ssh_key().with_suffix(".pub").read_text()
    entry["pid"] = hosts.start_host(host, rootfs, repo, public)
    _save(state)
    hosts.wait_ssh([host])
