"""Runs last: the lab goes down and leaves nothing behind."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.lab.conftest import LAB_INVENTORY, Lab

pytestmark = pytest.mark.lab


def leftovers() -> list[str]:
    found = []
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    found += [f"netns {x}" for x in re.findall(r"dklab-\S+", netns)]
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    found += [f"link {x}" for x in re.findall(r"\b(vh-lab\d+|dklab0)\b", links)]
    mounts = Path("/proc/mounts").read_text()
    found += [f"mount {line.split()[1]}" for line in mounts.splitlines()
              if "deploykit-lab" in line]
    for root in ("/sys/fs/cgroup/systemd", "/sys/fs/cgroup/unified", "/sys/fs/cgroup"):
        if os.path.isdir(root):
            found += [f"cgroup {root}/{d}" for d in os.listdir(root) if d.startswith("dklab-")]
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                argv = (proc / "cmdline").read_bytes().split(b"\0")
                # a process of the lab names its state dir, not a lock file that merely
                # shares the prefix (flock /tmp/deploykit-lab.lock around a test run)
                if any(b"/var/lib/deploykit-lab" in a or b"dklab-" in a for a in argv) \
                        and os.getpid() != int(proc.name):
                    found.append(f"process {proc.name}: {argv[0].decode(errors='replace')}")
            except OSError:
                continue
    if Path("/var/lib/deploykit-lab").exists():
        found.append("dir /var/lib/deploykit-lab")
    return found


def test_lab_down_leaves_nothing_and_is_safe_twice(lab: Lab) -> None:
    lab.deploykit("lab", "down")
    assert leftovers() == []
    lab.deploykit("lab", "down")  # the fixture's teardown runs it a third time
    assert leftovers() == []
    assert not LAB_INVENTORY.exists()
    status = lab.deploykit("lab", "status", check=False)
    assert status.returncode == 7


