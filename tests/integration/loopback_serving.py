"""A vLLM + standalone LMCache server on loopback, for the cache probe and the TTFT protocol
without a lab. Nothing here starts by itself: the tests use a vLLM that already answers on
DEPLOYKIT_LOOPBACK_VLLM (default 127.0.0.1:6800) and skip otherwise (CI has none).

The TTFT protocol's restart needs DEPLOYKIT_LOOPBACK_DIR: a directory holding `run.sh`
(starts both processes, writing `vllm.pid` and `lmc.pid` there, as the loopback experiment's
/tmp/exp/run.sh does) and `l2/`, the LMCache server's filesystem L2 (the remote tier here).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from deploy_kit.bench.ttft import Target
from deploy_kit.transport import openai as oa

MODEL = "/var/cache/deploykit/model-lab-llama-1"


def address() -> tuple[str, int]:
    raw = os.environ.get("DEPLOYKIT_LOOPBACK_VLLM", "127.0.0.1:6800")
    host, port = raw.rsplit(":", 1)
    return host, int(port)


def serving() -> oa.Served | None:
    host, port = address()
    seen = oa.served(host, port)
    return seen if seen.health == 200 and seen.models else None


def fake_host(name: str = "loopback") -> Any:
    """What the probes read from an inventory Host, for the loopback vLLM."""
    host, port = address()
    config = SimpleNamespace(vllm_port=port, lmcache_chunk_size=256, vllm_accelerator="cpu",
                             vllm_model=MODEL, vllm_served_model_name=None, vllm_api_key=None)
    return SimpleNamespace(name=name, address=host, config=config)


def target(seen: oa.Served) -> Target:
    host, port = address()
    return Target("loopback", host, port, seen.model or MODEL)


class LoopbackTier:
    """Restart = kill both processes and run run.sh again; remote tier = the fs L2 dir."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.l2 = directory / "l2"

    def restart(self, target: Target) -> None:
        pids = [int((self.dir / f).read_text()) for f in ("vllm.pid", "lmc.pid")
                if (self.dir / f).exists()]
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and any(_alive(p) for p in pids):
            time.sleep(0.5)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for segment in Path("/dev/shm").glob("lmcache_kv_*"):
            segment.unlink(missing_ok=True)
        subprocess.run(["sh", str(self.dir / "run.sh")], cwd=self.dir, check=True)

    def objects(self) -> set[str]:
        return {p.name for p in self.l2.iterdir()} if self.l2.is_dir() else set()

    def purge(self, keys: set[str]) -> int:
        for key in keys:
            (self.l2 / key).unlink(missing_ok=True)
        return len(keys)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
