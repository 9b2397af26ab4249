"""The CPU vLLM unit's ExecStopPost, as rendered, run by a real shell against real processes in
real cgroups: each vLLM stop leaks its KV segment (GiBs of /dev/shm) unless this line removes
it, and it must never remove the segment of a sibling instance that still serves.

systemd in a container on a hybrid cgroup host (the lab) runs ExecStopPost without waiting for
the unit's processes to die, so a worker of the stopping unit can still be alive: its segment
goes too. Root only (cgroups, a private /dev/shm)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from deploy_kit.ops.site import open_site
from deploy_kit.render.files import render_site
from tests.conftest import CPU_TWO_INSTANCES, InventoryFactory

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"),
                                reason="needs root and unshare (cgroups, a private /dev/shm)")


def _systemd_unquote(line: str, unit: str) -> str:
    """What systemd hands /bin/sh -c for this ExecStopPost (the specifiers this line uses)."""
    command = line.removeprefix("ExecStopPost=/bin/sh -c '").removesuffix("'")
    return command.replace("%n", unit).replace("%%", "%").replace("$$", "$")


def _cgroup_root() -> Path:
    """The hierarchy that names units in /proc/<pid>/cgroup: name=systemd (v1/hybrid) or v2."""
    hybrid = Path("/sys/fs/cgroup/systemd")
    return hybrid if (hybrid / "cgroup.procs").exists() else Path("/sys/fs/cgroup")


@pytest.fixture
def units() -> Iterator[Path]:
    base = _cgroup_root() / f"deploykit-test-{os.getpid()}"
    try:
        (base / "vllm.service").mkdir(parents=True)
        (base / "vllm-1.service").mkdir()
    except OSError as exc:
        pytest.skip(f"cannot make test cgroups under {base.parent}: {exc}")
    yield base
    for child in ("vllm.service", "vllm-1.service", ""):
        (base / child).rmdir()


def _worker_in(cgroup: Path) -> subprocess.Popen[bytes]:
    """A process that moved itself into cgroup before it started (as a vLLM worker would be)."""
    return subprocess.Popen(["sh", "-c", f'echo $$ > {cgroup / "cgroup.procs"} && exec sleep 60'])


def test_a_stop_removes_its_own_and_dead_segments_never_a_live_siblings(
        units: Path, make_inventory: InventoryFactory) -> None:
    hosts = CPU_TWO_INSTANCES
    unit_text = render_site(open_site(str(make_inventory(hosts))))["cpu1"][
        "/etc/systemd/system/vllm.service"].content
    [line] = [line for line in unit_text.splitlines() if line.startswith("ExecStopPost=")]
    stopping = _worker_in(units / "vllm.service")      # still exiting when ExecStopPost runs
    sibling = _worker_in(units / "vllm-1.service")      # the other instance, serving
    gone = subprocess.Popen(["true"])
    gone.wait()
    try:
        deadline = time.monotonic() + 10
        while not all(str(p.pid) in (units / u / "cgroup.procs").read_text()
                      for p, u in ((stopping, "vllm.service"), (sibling, "vllm-1.service"))):
            assert time.monotonic() < deadline, "the test workers never joined their cgroups"
            time.sleep(0.05)
        segments = {name: f"lmcache_kv_{p.pid}_0"
                    for name, p in (("stopping", stopping), ("sibling", sibling), ("gone", gone))}
        script = "\n".join([
            "mount -t tmpfs tmpfs /dev/shm",
            *(f"touch /dev/shm/{segment}" for segment in segments.values()),
            "touch /dev/shm/unrelated",
            f"sh -c {_shell_quote(_systemd_unquote(line, 'vllm.service'))}",
            "ls /dev/shm"])
        left = subprocess.run(["unshare", "--mount", "sh", "-c", script], check=True,
                              capture_output=True, text=True, timeout=30).stdout.split()
    finally:
        for process in (stopping, sibling):
            process.kill()
            process.wait()
    assert sorted(left) == sorted([segments["sibling"], "unrelated"]), left


def _shell_quote(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"
