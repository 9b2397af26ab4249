"""The script `secrets rotate s3` runs on each serving host (roles/serving/tasks/
key_age.yml) to tell whether a process still holds the old S3 key: with systemctl and ps
standing in, a unit whose main process started after the credentials file was written is
fresh, one started before it (or within the same second) stale, a stopped one down."""

from __future__ import annotations

import os
import stat
import subprocess
import time
from pathlib import Path

import yaml

from tests.conftest import REPO


def script() -> str:
    tasks = yaml.safe_load((REPO / "roles/serving/tasks/key_age.yml").read_text())
    return str(tasks[0]["vars"]["__serving_key_age_script"])


def tool(path: Path, body: str) -> None:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def test_each_unit_is_fresh_stale_or_down(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # systemctl show --value -p MainPID UNIT: 0 for a stopped unit; ps -o etimes= -p PID:
    # the seconds the process has run (here: its pid, for a test that picks ages)
    tool(bin_dir / "systemctl", 'case "$5" in down.service) echo 0;; '
                                 'fresh.service) echo 5;; *) echo 500;; esac\n')
    tool(bin_dir / "ps", 'echo "   $4"\n')
    credentials = tmp_path / "credentials"
    credentials.write_text("[lmcache]\n")
    written = int(time.time()) - 60  # written a minute ago
    os.utime(credentials, (written, written))
    done = subprocess.run(["sh", "-c", script(), str(credentials), "fresh.service",
                           "stale.service", "down.service"], capture_output=True, text=True,
                          env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"},
                          timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["fresh.service fresh", "stale.service stale",
                                        "down.service down"]
    # a process started in the second the file was written counts as stale
    os.utime(credentials, (int(time.time()) - 5, int(time.time()) - 5))
    same = subprocess.run(["sh", "-c", script(), str(credentials), "fresh.service"],
                          capture_output=True, text=True, timeout=30,
                          env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"})
    assert same.stdout.split() == ["fresh.service", "stale"]
