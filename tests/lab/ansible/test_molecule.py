"""Molecule is the one place for converge -> idempotence -> verify of the playbooks as
Ansible runs them (a plain ansible-playbook, rendering in its first play), on a fresh lab
(`lab up --profile plain`, nothing converged before it, so molecule's converge does the
work and its idempotence check means something). Then `deploykit up` on the same lab must
change nothing: both front doors produce the same site."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.lab.conftest import Lab

pytestmark = pytest.mark.lab
BIN = Path(sys.executable).parent
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def test_molecule_on_a_fresh_lab_then_deploykit_up_changes_nothing(lab: Lab) -> None:
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"}
    env.pop("ANSIBLE_CONFIG", None)  # molecule writes its own
    # one invocation: molecule keeps the "converged" state of its sequence in memory
    result = subprocess.run([str(BIN / "molecule"), "test"], cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=1800)
    output = ANSI.sub("", result.stdout + result.stderr)
    assert result.returncode == 0, output[-4000:]
    assert "CRITICAL" not in output and "Idempotence test failed" not in output, output[-4000:]
    assert "Render every host's files" in output  # the plain path rendered the site
    assert output.count("PLAY RECAP") >= 3, output[-3000:]  # converge, idempotence, verify
    assert "Run every deploykit check against the lab" in output
    after = lab.converge()
    assert after["rc"] == 0 and not after["failed"], after["failed"]
    assert after["changed"] == 0, after["changed_tasks"]
