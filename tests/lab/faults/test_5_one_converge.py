"""One converge at a time: a second `deploykit up` of the lab started while a first one runs
is refused at once (exit 7), naming the first run's pid, and the first completes untouched.

The first run is a real converge of the converged lab (it changes nothing), so this is the
situation an operator meets when a CI rollout and a hand-run `up` overlap. The lock is the
site's flock on the controller (deploy_kit/ops/site_lock.py); the test reads its holder
record only to know when the first run holds it."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time

import pytest

from deploy_kit.ops.site import open_site
from deploy_kit.ops.site_lock import lock_path
from tests.lab.conftest import INSTALLED_CLI, LAB_INVENTORY, LAB_SITE, Lab

pytestmark = pytest.mark.lab


def holder_pid(deadline_s: float) -> int:
    path = lock_path(open_site(str(LAB_INVENTORY)))  # keyed by the site's identity
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        try:
            record = json.loads(path.read_text() or "{}")
        except (OSError, ValueError):
            record = {}
        if record.get("pid"):
            return int(record["pid"])
        time.sleep(0.2)
    raise AssertionError(f"no run took the site lock {path} within {deadline_s:.0f} s")


def test_second_up_is_refused_naming_the_first_while_it_completes(converged: Lab) -> None:
    cli = [INSTALLED_CLI] if INSTALLED_CLI else [sys.executable, "-m", "deploy_kit"]
    # the first run's output goes to a file, not a pipe: it must never block on a full pipe
    with tempfile.TemporaryFile(mode="w+") as log:
        first = subprocess.Popen([*cli, "up", "--inventory", "lab"], cwd=LAB_SITE,
                                 env=converged.env(), stdout=log, stderr=subprocess.STDOUT,
                                 text=True)
        try:
            pid = holder_pid(120)
            assert pid == first.pid, f"the lock names pid {pid}, the first up is {first.pid}"
            started = time.monotonic()
            second = converged.deploykit("up", "--inventory", "lab", check=False)
            refused_in = time.monotonic() - started
            message = second.stdout + second.stderr
            assert second.returncode == 7, message
            assert f"pid {first.pid}" in message and "holds the lock" in message, message
            assert refused_in < 30, f"the refusal took {refused_in:.1f} s: it must not wait"
            assert first.poll() is None, "the first up ended before the second was refused"
            first.wait(timeout=1800)
        finally:
            if first.poll() is None:
                first.kill()
        log.seek(0)
        assert first.returncode == 0, log.read()[-4000:]
    # the lock is free again: its record was emptied when the first run released it
    released = lock_path(open_site(str(LAB_INVENTORY))).read_text()
    assert released == "", "the released lock kept a holder record"
