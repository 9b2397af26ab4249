"""`lab down` leaves nothing even after an interrupted lab: every process of a host's cgroup
tree dies (the host's systemd keeps its services in nested cgroups), hosts no state file
names are found by their cgroups, and `lab up`/`lab down` wait for each other."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from deploykit_lab import hosts, lab


def _cgroup_root() -> Path:
    for root in (Path("/sys/fs/cgroup/unified"), Path("/sys/fs/cgroup")):
        if (root / "cgroup.procs").exists() and os.access(root, os.W_OK):
            return root
    pytest.skip("needs root and a writable cgroup2 hierarchy")


@pytest.fixture
def nested_cgroup() -> Iterator[Path]:
    """A cgroup with a process two levels down, as an orphaned lab host's services are."""
    top = _cgroup_root() / f"dk-unittest-{os.getpid()}"
    inner = top / "payload" / "system.slice"
    inner.mkdir(parents=True)
    yield top
    for d in sorted(top.rglob("*"), key=lambda p: len(p.parts), reverse=True):
        if d.is_dir():
            d.rmdir()
    top.rmdir()


def test_kill_tree_kills_processes_in_nested_cgroups(nested_cgroup: Path) -> None:
    inner = nested_cgroup / "payload" / "system.slice"
    sleepers = [subprocess.Popen(["sleep", "300"]) for _ in range(2)]
    for proc in sleepers:
        (inner / "cgroup.procs").write_text(str(proc.pid))
    # the old teardown read only the top cgroup's own procs: these were never there
    assert not (nested_cgroup / "cgroup.procs").read_text().split()
    assert hosts.tree_pids([nested_cgroup]) == {p.pid for p in sleepers}

    left = hosts.kill_tree([nested_cgroup], timeout=5)

    assert left == set()
    assert [p.wait(timeout=5) for p in sleepers] == [-9, -9]
    assert hosts.tree_pids([nested_cgroup]) == set()


def test_lab_hosts_are_found_by_their_cgroups(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("dklab-lab2", "dklab-lab11", "dklab-labx", "dklab-other", "system.slice"):
        (tmp_path / name).mkdir()
    monkeypatch.setattr(hosts, "CGROUP_ROOTS", (tmp_path,))
    assert hosts.lab_cgroup_names() == {"lab2", "lab11"}


def test_lab_up_and_down_wait_for_each_other(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lab, "LOCK_FILE", tmp_path / "run" / "deploykit-lab.lock")
    events: list[str] = []
    holding = threading.Event()

    def first() -> None:
        with lab._exclusive(events.append):
            events.append("first in")
            holding.set()
            time.sleep(0.5)
            events.append("first out")

    thread = threading.Thread(target=first)
    thread.start()
    holding.wait(5)
    with lab._exclusive(events.append):
        events.append("second in")
    thread.join()

    assert events[0] == "first in"
    assert events[1].startswith("… waiting for another lab up/down (pid ")
    assert events[2:] == ["first out", "second in"]
