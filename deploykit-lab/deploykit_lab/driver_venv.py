"""The one controller venv both lab round-trip drivers run in (`verify --roundtrip`, S3 or
NIXL): the lab hosts' exact serving stack (their lock, installed offline from the cached
wheelhouse: CPU torch, no CUDA download) plus LMCache's `nixl` extra. Each driver runs inside
a serving host's network namespace, with that host's DNS, credentials and files.

The lab's hosts run the S3 path (CPU vLLM refuses the in-process NIXL connector), so they
carry no NIXL themselves; everything else here is their own lock."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from deploy_kit.core import compat
from deploy_kit.ops.wheelhouse import LOCK_NAME
from deploykit_lab.layout import CACHE_DIR
from deploykit_lab.serving import LMCACHE_VERSION, ensure_serving
from deploykit_lab.system import cache_lock

READY = ".deploykit-ready"


def _path() -> Path:
    pins = "-".join(compat.lmcache(LMCACHE_VERSION).nixl_packages).replace("==", "-")
    return CACHE_DIR / f"driver-venv-lmcache-{LMCACHE_VERSION}-{pins}"


def ready_driver_venv() -> Path | None:
    venv = _path()
    return venv if (venv / READY).exists() else None


def _run(args: list[str]) -> None:
    proc = subprocess.run(args, capture_output=True, text=True, timeout=1800, check=False)
    if proc.returncode:
        raise RuntimeError(f"{' '.join(args[:3])}… failed: {proc.stderr.strip()[-800:]}")


def ensure_driver_venv() -> Path:
    with cache_lock("driver-venv"):
        return _ensure_driver_venv()


def _ensure_driver_venv() -> Path:
    """Built once (about 3 minutes: the hosts' 202 wheels, then NIXL's two from PyPI)."""
    if (venv := ready_driver_venv()) is not None:
        return venv
    venv = _path()
    wheelhouse = ensure_serving().wheelhouse
    shutil.rmtree(venv, ignore_errors=True)
    _run(["python3", "-m", "venv", str(venv)])
    pip = str(venv / "bin" / "pip")
    _run([pip, "install", "-q", "--no-index", "--no-deps", "--require-hashes",
          "--find-links", str(wheelhouse), "-r", str(wheelhouse / LOCK_NAME)])
    # torch and numpy (NIXL's requirements) come from the lock: only NIXL is fetched
    _run([pip, "install", "-q", *compat.lmcache(LMCACHE_VERSION).nixl_packages])
    (venv / READY).write_text("ok\n")
    return venv
