"""LMCache's own S3 connector, driven without a GPU: store or fetch the KV chunks of a fixed
token sequence. Run by `deploykit verify --roundtrip` with the LMCache venv's python, the
serving host's deployed lmcache.yaml (LMCACHE_CONFIG_FILE), AWS profile and PYTHONHASHSEED.

    python lmcache_roundtrip.py store|fetch MODEL LAYERS KV_HEADS HEAD_DIM TOKENS

Prints one JSON line: the object keys LMCache computed, hits, and whether the bytes fetched
equal the bytes stored. Uses LMCache as installed (no copied code).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import sys
import threading


def chunk_tensor(torch, shape, index):
    generator = torch.Generator().manual_seed(1234 + index)
    return torch.randn(shape, generator=generator, dtype=torch.float32).to(torch.bfloat16)


def digest(tensor) -> str:
    return hashlib.sha256(tensor.contiguous().view(-1).view(__import__("torch").uint8)
                          .numpy().tobytes()).hexdigest()


def main() -> None:
    mode, model = sys.argv[1], sys.argv[2]
    layers, heads, head_dim, n_tokens = (int(x) for x in sys.argv[3:7])
    import torch
    from lmcache.v1.config import LMCacheEngineConfig
    from lmcache.v1.metadata import LMCacheMetadata
    from lmcache.v1.storage_backend.connector import CreateConnector
    from lmcache.v1.storage_backend.local_cpu_backend import LocalCPUBackend
    from lmcache.v1.token_database import ChunkedTokenDatabase

    config = LMCacheEngineConfig.from_file(os.environ["LMCACHE_CONFIG_FILE"])
    config.validate()
    metadata = LMCacheMetadata(
        model_name=model, world_size=1, local_world_size=1, worker_id=0, local_worker_id=0,
        kv_dtype=torch.bfloat16, kv_shape=(layers, 2, config.chunk_size, heads, head_dim),
        chunk_size=config.chunk_size, role="worker")
    cpu = LocalCPUBackend(config, metadata, dst_device="cpu")
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()

    def wait(coro, timeout: float = 120):
        return asyncio.run_coroutine_threadsafe(coro, loop).result(timeout)

    connector = CreateConnector(config.remote_url, loop, cpu, config, metadata)
    tokens = list(range(1000, 1000 + n_tokens))
    keys = [key for _, _, key in ChunkedTokenDatabase(config, metadata).process_tokens(
        tokens=tokens)]
    shape = metadata.get_shapes()[0]
    result: dict[str, object] = {"keys": [k.to_string() for k in keys],
                                 "chunk_bytes": shape.numel() * 2}
    if mode == "store":
        stored = []
        for i, key in enumerate(keys):
            obj = cpu.allocate(shape, torch.bfloat16)
            obj.tensor.copy_(chunk_tensor(torch, shape, i))
            stored.append(digest(obj.tensor))  # before put: put releases the object
            wait(connector.put(key, obj))
        result["stored"] = stored
        result["exists"] = [bool(wait(connector.exists(k))) for k in keys]
    else:
        result["hits"] = int(wait(connector.batched_async_contains("deploykit", keys)))
        identical = []
        for i, key in enumerate(keys[: result["hits"]]):
            obj = wait(connector.get(key))
            identical.append(obj is not None and
                             digest(obj.tensor) == digest(chunk_tensor(torch, shape, i)))
        result["identical"] = identical
    print(json.dumps(result), flush=True)
    os._exit(0)  # S3Connector.close() deadlocks in 0.5.6; the process must not wait on it


if __name__ == "__main__":
    main()
