"""The rendered chunk-key hash, read by the real LMCache 0.5.6 (the lab's driver venv, with
vLLM installed as on a serving host): SHA-256 from vLLM, the same keys in every process
whatever Python's hash secret; `builtin` (the opt-out) differs between processes unless
PYTHONHASHSEED is shared. Skipped where the driver venv is not built (`deploykit lab up`
builds it)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from deploy_kit.config.models import HostConfig
from deploy_kit.ops.site import open_site
from deploy_kit.render import lmcache_server
from deploy_kit.render.files import render_site
from tests.conftest import CPU_TWO_INSTANCES, REPO, InventoryFactory
from tests.integration.test_consul_dns import free_port

try:
    from deploykit_lab.driver_venv import ready_driver_venv
except ImportError:  # deploykit-lab not installed
    VENV = None
else:
    VENV = ready_driver_venv()

pytestmark = pytest.mark.skipif(VENV is None, reason="the lab's LMCache driver venv is not built")

KEYS = """
import json, sys, torch
from lmcache.v1.config import LMCacheEngineConfig
from lmcache.v1.metadata import LMCacheMetadata
from lmcache.v1.token_database import ChunkedTokenDatabase
config = LMCacheEngineConfig.from_file(sys.argv[1])
config.validate()
meta = LMCacheMetadata(model_name="m", world_size=1, local_world_size=1, worker_id=0,
                       local_worker_id=0, kv_dtype=torch.bfloat16,
                       kv_shape=(2, 2, config.chunk_size, 1, 8), chunk_size=config.chunk_size,
                       role="worker")
db = ChunkedTokenDatabase(config, meta)
keys = [k.to_string() for _, _, k in db.process_tokens(tokens=list(range(2 * config.chunk_size)))]
print(json.dumps({"fn": f"{db.hash_func.__module__}.{db.hash_func.__name__}", "keys": keys}))
"""

SERVER = """
import json, sys
from lmcache.v1.multiprocess.token_hasher import TokenHasher
h = TokenHasher(chunk_size=4, hash_algorithm=sys.argv[1])
print(json.dumps({"fn": f"{h.hash_func.__module__}.{h.hash_func.__name__}"}))
"""


def _run(script: str, arg: str, seed: str | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONHASHSEED"}
    env |= {"LMCACHE_TRACK_USAGE": "false", "DO_NOT_TRACK": "1"}
    if seed is not None:
        env["PYTHONHASHSEED"] = seed
    out = subprocess.run([str(VENV / "bin" / "python"), "-c", script, arg], env=env,
                         capture_output=True, text=True, timeout=300, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _lmcache_yaml(make_inventory: InventoryFactory, tmp_path: Path, **settings: object) -> Path:
    site = open_site(str(make_inventory(all=settings)))
    files = render_site(site)["gpu1"]
    content = next(f.content for path, f in files.items() if path.endswith("/lmcache.yaml"))
    path = tmp_path / f"lmcache-{len(settings)}.yaml"
    path.write_text(content)
    return path


def test_the_default_is_vllms_sha256_with_the_same_keys_in_every_process(
        make_inventory: InventoryFactory, tmp_path: Path) -> None:
    config = _lmcache_yaml(make_inventory, tmp_path, lmcache_topology="inprocess")
    assert "pre_caching_hash_algorithm: sha256_cbor\n" in config.read_text()
    runs = [_run(KEYS, str(config), None), _run(KEYS, str(config), None),
            _run(KEYS, str(config), "67")]
    assert {r["fn"] for r in runs} == {"vllm.utils.hashing.sha256_cbor"}  # not the fallback
    assert runs[0]["keys"] == runs[1]["keys"] and len(runs[0]["keys"]) == 2
    assert runs[2]["keys"] != runs[0]["keys"]  # the seed still keys it: one value fleet-wide


def test_builtin_is_pythons_hash_and_needs_the_shared_seed(
        make_inventory: InventoryFactory, tmp_path: Path) -> None:
    config = _lmcache_yaml(make_inventory, tmp_path, lmcache_topology="inprocess",
                           lmcache_pre_caching_hash_algorithm="builtin")
    unseeded = [_run(KEYS, str(config), None) for _ in range(2)]
    assert {r["fn"] for r in unseeded} == {"builtins.hash"}
    assert unseeded[0]["keys"] != unseeded[1]["keys"]  # random str-hash secret per process
    seeded = [_run(KEYS, str(config), "67") for _ in range(2)]
    assert seeded[0]["keys"] == seeded[1]["keys"]


def test_the_server_gets_the_same_hash(make_inventory: InventoryFactory) -> None:
    site = open_site(str(make_inventory(CPU_TWO_INSTANCES)))
    argv = lmcache_server.server_argv(site.hosts["cpu1"].config)
    alg = argv[argv.index("--hash-algorithm") + 1]
    assert alg == "sha256_cbor"
    assert _run(SERVER, alg, None)["fn"] == "vllm.utils.hashing.sha256_cbor"
    assert REPO.is_dir()


def test_the_rendered_server_command_starts_with_vllms_sha256(tmp_path: Path) -> None:
    """`lmcache server` itself, with the rendered argv (dram mode, loopback ports)."""
    c = HostConfig(vllm_accelerator="cpu", vllm_version="0.32.0", lmcache_topology="server",
                   lmcache_mode="dram", lmcache_server_l1_size_gb=1, vllm_venv=str(VENV),
                   lmcache_server_port=free_port(), lmcache_server_http_port=free_port(),
                   lmcache_server_metrics_port=free_port())
    log = tmp_path / "server.log"
    env = {**os.environ, **lmcache_server.server_env(c)}
    with log.open("wb") as out:
        proc = subprocess.Popen(lmcache_server.server_argv(c), env=env, stdout=out,
                                stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 240
        while "Application startup complete" not in log.read_text(errors="replace"):
            assert proc.poll() is None, log.read_text(errors="replace")[-3000:]
            assert time.monotonic() < deadline, "lmcache server never started"
            time.sleep(1)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    text = log.read_text(errors="replace")
    assert "Loaded 'sha256_cbor' from vllm.utils.hashing" in text
    assert "hash_algorithm=sha256_cbor" in text and "Using builtin hash" not in text
