"""Lab hosts: systemd-nspawn containers booting real systemd, each in its own network
namespace on the lab bridge, with its own cgroup and a fixed MAC."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

from deploykit_lab.layout import (
    BRIDGE,
    CGROUP_PREFIX,
    GATEWAY,
    PREFIX_LEN,
    SSH_DIR,
    SUDO_UID,
    SUDO_USER,
    LabHost,
)
from deploykit_lab.system import LabError, log, quiet, run

CGROUP_ROOTS = (Path("/sys/fs/cgroup/systemd"), Path("/sys/fs/cgroup/unified"))


def cgroup_dirs(host: LabHost) -> list[Path]:
    """Hybrid hierarchy here; nspawn takes its own cgroup from *both*, so create both."""
    roots = [r for r in CGROUP_ROOTS if r.is_dir()]
    if not roots:
        roots = [Path("/sys/fs/cgroup")]  # pure cgroup2 machine
    return [r / host.cgroup for r in roots]


def ensure_bridge() -> None:
    if not Path(f"/sys/class/net/{BRIDGE}").exists():
        run(["ip", "link", "add", BRIDGE, "type", "bridge"])
        run(["ip", "addr", "add", f"{GATEWAY}/{PREFIX_LEN}", "dev", BRIDGE])
    run(["ip", "link", "set", BRIDGE, "up"])


def remove_bridge() -> None:
    if Path(f"/sys/class/net/{BRIDGE}").exists():
        quiet(["ip", "link", "del", BRIDGE])


def ensure_ssh_key() -> Path:
    key = SSH_DIR / "id_ed25519"
    if not key.exists():
        SSH_DIR.mkdir(parents=True, exist_ok=True)
        SSH_DIR.chmod(0o700)
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "deploykit-lab",
             "-f", str(key)])
    return key


# nspawn mounts a host's /dev/shm at a tenth of this machine's memory (2.4 GiB of 24): one
# CPU vLLM (VLLM_CPU_KVCACHE_SPACE 1 GiB) and its LMCache server's 1 GiB L1 fit, lab3's two
# instances and that L1 do not (verify dev-shm-capacity). A unit remounts it larger at every
# boot of the host; it is a limit, memory is used only as the segments are.
SHM_SIZE = "4G"
SHM_UNIT = f"""[Unit]
Description=deploykit lab: /dev/shm of {SHM_SIZE} (several vLLM instances and an LMCache L1)
DefaultDependencies=no
Before=sysinit.target

[Service]
Type=oneshot
ExecStart=/bin/mount -o remount,size={SHM_SIZE} /dev/shm

[Install]
WantedBy=sysinit.target
"""


def shm_size(merged: Path) -> None:
    units = merged / "etc" / "systemd" / "system"
    wants = units / "sysinit.target.wants"
    wants.mkdir(parents=True, exist_ok=True)
    (units / "deploykit-lab-shm.service").write_text(SHM_UNIT)
    link = wants / "deploykit-lab-shm.service"
    if not link.is_symlink():
        link.symlink_to("/etc/systemd/system/deploykit-lab-shm.service")


def start_host(host: LabHost, rootfs: Path, repo: Path, public_key: str) -> int:
    """Overlay on the shared image, netns + veth, then nspawn in its own cgroup."""
    upper, work, merged = host.root / "upper", host.root / "work", host.root / "merged"
    for d in (upper, work, merged):
        d.mkdir(parents=True, exist_ok=True)
    run(["mount", "-t", "overlay", "overlay", "-o",
         f"lowerdir={rootfs},upperdir={upper},workdir={work}", str(merged)])
    (merged / "etc" / "hostname").write_text(host.name + "\n")
    (merged / "etc" / "hosts").write_text(f"127.0.0.1 localhost\n{host.address} {host.name}\n")
    shm_size(merged)
    # root for the test harness's own looks; the sudo user for the inventory's become host
    for home, uid in ((merged / "root", 0), (merged / "home" / SUDO_USER, SUDO_UID)):
        ssh = home / ".ssh"
        ssh.mkdir(mode=0o700, parents=True, exist_ok=True)
        (ssh / "authorized_keys").write_text(public_key)
        (ssh / "authorized_keys").chmod(0o600)
        for path in (ssh, ssh / "authorized_keys"):
            os.chown(path, uid, uid)
    quiet(["ip", "netns", "del", host.netns])
    quiet(["ip", "link", "del", host.veth])
    quiet(["ip", "neigh", "del", host.address, "dev", BRIDGE])
    run(["ip", "netns", "add", host.netns])
    run(["ip", "link", "add", host.veth, "type", "veth", "peer", "name", "eth0", "netns",
         host.netns, "address", host.mac])
    run(["ip", "link", "set", host.veth, "master", BRIDGE, "up"])
    run(["ip", "-n", host.netns, "addr", "add", f"{host.address}/{PREFIX_LEN}", "dev", "eth0"])
    run(["ip", "-n", host.netns, "link", "set", "eth0", "up"])
    run(["ip", "-n", host.netns, "link", "set", "lo", "up"])
    run(["ip", "-n", host.netns, "route", "add", "default", "via", GATEWAY])
    dirs = cgroup_dirs(host)
    for d in dirs:
        d.mkdir(exist_ok=True)
    join = "; ".join(f"echo $$ > {d}/cgroup.procs" for d in dirs)
    nspawn = (f"exec systemd-nspawn -D {merged} --boot --register=no --keep-unit "
              f"--machine={host.name} --network-namespace-path=/run/netns/{host.netns} "
              f"--console=passive --resolv-conf=off --timezone=off --link-journal=no "
              f"--bind-ro={repo}:/repo")
    out = (host.root / "console.log").open("a")
    proc = subprocess.Popen(["bash", "-c", f"{join}; {nspawn}"], stdout=out,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True)
    log(f"started {host.name} nspawn pid {proc.pid}")
    return proc.pid


def wait_ssh(hosts: list[LabHost], timeout: float = 60) -> None:
    """Wait until every host's sshd sends its banner."""
    pending = {h.name: h for h in hosts}
    deadline = time.monotonic() + timeout
    while pending and time.monotonic() < deadline:
        for name, host in list(pending.items()):
            try:
                with socket.create_connection((host.address, 22), timeout=1) as s:
                    s.settimeout(2)
                    if s.recv(4).startswith(b"SSH"):
                        del pending[name]
            except OSError:
                pass
        if pending:
            time.sleep(0.5)
    if pending:
        raise LabError(f"SSH did not come up on {', '.join(sorted(pending))}",
                       hint="see /var/lib/deploykit-lab/hosts/<host>/console.log")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie still answers signal 0; it is gone for our purposes
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def stop_host(host: LabHost, pid: int | None) -> None:
    """nspawn turns SIGTERM into an orderly poweroff; then everything it made is removed."""
    stop_hosts([(host, pid)])


def stop_hosts(stopping: list[tuple[LabHost, int | None]]) -> None:
    """Power the hosts off together (one 20 s grace for all, not 20 s each: a vLLM that
    drains on SIGTERM would otherwise hold `lab down` once per serving host), then remove
    everything each made."""
    running = [pid for _, pid in stopping if pid and _alive(pid)]
    for pid in running:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 20
    while any(_alive(pid) for pid in running) and time.monotonic() < deadline:
        time.sleep(0.3)
    for host, _ in stopping:
        _remove_host(host)


def _remove_host(host: LabHost) -> None:
    kill_tree(cgroup_dirs(host))  # anything left anywhere in the host's cgroup tree
    merged = host.root / "merged"
    if os.path.ismount(merged) and not quiet(["umount", str(merged)]):
        quiet(["umount", "-l", str(merged)])
    quiet(["ip", "netns", "del", host.netns])
    quiet(["ip", "link", "del", host.veth])
    quiet(["ip", "neigh", "del", host.address, "dev", BRIDGE])
    for d in cgroup_dirs(host):
        _remove_cgroup(d)


def tree_pids(dirs: list[Path]) -> set[int]:
    """Every process in these cgroups and in all their descendants: the host's own systemd
    keeps its services in nested cgroups (payload/system.slice/…), not in the top one."""
    pids: set[int] = set()
    for d in dirs:
        for procs in [d / "cgroup.procs", *d.rglob("*/cgroup.procs")] if d.is_dir() else []:
            with contextlib.suppress(OSError):
                pids.update(int(line) for line in procs.read_text().split())
    return pids


def kill_tree(dirs: list[Path], timeout: float = 10.0) -> set[int]:
    """SIGKILL every process of these cgroup trees, until none is left (a forking process
    adds pids between reads). cgroup v2's cgroup.kill does it in one write where the kernel
    has it (5.14+); every descendant's cgroup.procs is read as well, for the v1 hierarchies
    of a hybrid machine. Returns the pids still there at the deadline (none, normally)."""
    deadline = time.monotonic() + timeout
    while True:
        for d in dirs:
            with contextlib.suppress(OSError):
                (d / "cgroup.kill").write_text("1")
        left = {pid for pid in tree_pids(dirs) if pid != os.getpid()}
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if not {pid for pid in left if _alive(pid)} or time.monotonic() > deadline:
            return {pid for pid in left if _alive(pid)}
        time.sleep(0.2)


def lab_cgroup_names() -> set[str]:
    """Host names whose cgroup is still there (the lab's hosts found by their cgroups, not
    only by a state file an interrupted run may not have written)."""
    roots = [r for r in CGROUP_ROOTS if r.is_dir()] or [Path("/sys/fs/cgroup")]
    names = {d.name.removeprefix(CGROUP_PREFIX) for r in roots
             for d in r.glob(f"{CGROUP_PREFIX}lab*") if d.is_dir()}
    return {n for n in names if n[3:].isdigit()}


def lab_netns_names() -> set[str]:
    """Host names whose network namespace is still there."""
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    names = (line.split()[0] for line in listed.splitlines() if line.strip())
    return {n.removeprefix(CGROUP_PREFIX) for n in names
            if n.startswith(f"{CGROUP_PREFIX}lab") and n.removeprefix(CGROUP_PREFIX)[3:].isdigit()}


def _remove_cgroup(path: Path) -> None:
    """Bottom-up, again and again until the deadline: a nested cgroup whose last process is
    still exiting (a loaded machine) refuses rmdir for a moment, and so does every parent."""
    deadline = time.monotonic() + 30
    while path.is_dir():
        for child in sorted(path.rglob("*"), key=lambda p: len(p.parts), reverse=True):
            if child.is_dir():
                with contextlib.suppress(OSError):
                    child.rmdir()
        with contextlib.suppress(OSError):
            path.rmdir()
        if not path.is_dir() or time.monotonic() > deadline:
            return
        time.sleep(0.3)
