"""LMCache's NIXL storage backend (dynamic mode, NIXL's OBJ plugin, CPU buffers), driven
without a GPU: store or fetch the KV chunks of a fixed token sequence. Run by
`deploykit verify --roundtrip` for `lmcache_mode: nixl` hosts with the LMCache venv's python,
the host's lmcache.yaml (LMCACHE_CONFIG_FILE: its nixl_backend_params), AWS profile and
PYTHONHASHSEED.

    python lmcache_nixl_roundtrip.py store|fetch MODEL LAYERS KV_HEADS HEAD_DIM TOKENS

Prints one JSON line: LMCache's keys, the object names NIXL used, hits, and whether the
bytes fetched equal the bytes stored. Uses LMCache and NIXL as installed (no copied code).
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
    from lmcache.v1.storage_backend import CreateStorageBackends
    from lmcache.v1.token_database import ChunkedTokenDatabase

    config = LMCacheEngineConfig.from_file(os.environ["LMCACHE_CONFIG_FILE"])
    config.validate()
    # the CPU pool NIXL stages in only holds this run's chunks: never allocate the host's
    # production size (50 GB by default in nixl mode) beside a running vLLM
    config.max_local_cpu_size = min(config.max_local_cpu_size, 1.0)
    metadata = LMCacheMetadata(
        model_name=model, world_size=1, local_world_size=1, worker_id=0, local_worker_id=0,
        kv_dtype=torch.bfloat16, kv_shape=(layers, 2, config.chunk_size, heads, head_dim),
        chunk_size=config.chunk_size, role="worker")
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()
    # the engine's own factory: with nixl_buffer_device cpu it builds the paged CPU pool and
    # registers it with NIXL, exactly as vLLM's worker does
    backends = CreateStorageBackends(config, metadata, loop, dst_device="cpu")
    nixl = backends.get("NixlStorageBackend")
    if nixl is None:
        print(json.dumps({"error": "no NixlStorageBackend: is enable_nixl_storage set?"}))
        os._exit(1)
    tokens = list(range(1000, 1000 + n_tokens))
    keys = [key for _, _, key in ChunkedTokenDatabase(config, metadata).process_tokens(
        tokens=tokens)]
    shape = metadata.get_shapes()[0]
    result: dict[str, object] = {
        "keys": [k.to_string() for k in keys], "chunk_bytes": shape.numel() * 2,
        "objects": [nixl._format_object_key(k) for k in keys],
        "backend": type(nixl).__name__}
    if mode == "store":
        stored, objs = [], []
        for i in range(len(keys)):
            obj = nixl.allocate(shape, torch.bfloat16)
            obj.tensor.copy_(chunk_tensor(torch, shape, i))
            stored.append(digest(obj.tensor))
            objs.append(obj)
        nixl.batched_submit_put_task(keys, objs)  # sync mode: returns when NIXL is done
        result["stored"] = stored
        # a put that fails is only logged (best-effort offload): ask the store itself
        result["exists"] = [bool(nixl.contains(k)) for k in keys]
    else:
        result["hits"] = int(nixl.batched_contains(keys))
        fetched = nixl.batched_get_blocking(keys[: result["hits"]])
        result["identical"] = [
            obj is not None and digest(obj.tensor) == digest(chunk_tensor(torch, shape, i))
            for i, obj in enumerate(fetched)]
    print(json.dumps(result), flush=True)
    os._exit(0)  # skip the backends' close(): the process is done with them


if __name__ == "__main__":
    main()
