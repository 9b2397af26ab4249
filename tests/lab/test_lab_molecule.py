"""Molecule is the one place for converge -> idempotence -> verify of the playbooks as
Ansible runs them (a plain ansible-playbook, rendering in its first play): the lab suite
runs the scenario molecule/lab on the lab it brought up, after `deploykit up` converged it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO
from tests.lab.conftest import Lab

BIN = Path(sys.executable).parent


def molecule(step: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"}
    env.pop("ANSIBLE_CONFIG", None)  # molecule writes its own
    return subprocess.run([str(BIN / "molecule"), step, "-s", "lab"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=1200)


def test_molecule_converge_idempotence_verify(converged: Lab) -> None:
    for step in ("converge", "idempotence", "verify"):
        result = molecule(step)
        output = result.stdout + result.stderr
        assert result.returncode == 0, f"molecule {step}:\n{output[-4000:]}"
        if step == "converge":
            assert "Render every host's files" in output  # the plain path rendered
        if step == "idempotence":
            assert "Idempotence completed successfully" in output, output[-2000:]
