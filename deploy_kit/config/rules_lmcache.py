"""LMCache's own settings: chunks against vLLM's blocks and the context, the connector and
kv-transfer fields the pinned vLLM accepts, the extra and top-level keys the pinned LMCache
reads, the chunk-key hash, the NIXL buffer and CRT part size, MLA models."""

from __future__ import annotations

from collections.abc import Iterator

from deploy_kit.config.rulebook import collector
from deploy_kit.config.rulebook import src as _src
from deploy_kit.config.site import Host, Site
from deploy_kit.core import compat
from deploy_kit.core.errors import Problem
from deploy_kit.core.geometry import chunk_layout, kv_dtype_bytes

RULES, rule = collector()


@rule
def chunk_aligned_to_block(site: Site) -> Iterator[Problem]:
    """LMCache chunk_size must be a multiple of vLLM's block size, or hashes never match."""
    for host in site.group("vllm"):
        if host.config.vllm_accelerator is None:
            continue
        try:
            chunk, block = host.config.lmcache_chunk_size, host.block_size
        except ValueError:  # unsupported vllm_version: versions_supported reports it
            continue
        if chunk % block:
            yield Problem(_src(site, host, "lmcache_chunk_size"), "lmcache_chunk_size",
                          f"{chunk} is not a multiple of the vLLM block size {block}",
                          f"use a multiple of {block}, e.g. {max(block, chunk // block * block)}",
                          hosts=(host.name,))


@rule
def no_unfull_chunks_remote(site: Site) -> Iterator[Problem]:
    """S3 and NIXL refuse partial chunks: save_unfull_chunk must be false for them."""
    for host in site.group("vllm"):
        if host.config.lmcache_mode in ("s3", "nixl") and host.config.lmcache_save_unfull_chunk:
            yield Problem(_src(site, host, "lmcache_save_unfull_chunk"),
                          "lmcache_save_unfull_chunk",
                          f"true with lmcache_mode {host.config.lmcache_mode} on {host.name}",
                          "set it to false (remote backends reject partial chunks)")


@rule
def kv_transfer_config_valid(site: Site) -> Iterator[Problem]:
    """Connector name exact; kv-transfer fields limited to what the pinned vLLM accepts."""
    for host in site.group("vllm"):
        try:
            table = compat.vllm(host.config.vllm_version)
        except ValueError:
            continue
        if host.config.kv_connector not in table.lmcache_connectors:
            yield Problem(_src(site, host, "vllm_kv_connector"), "vllm_kv_connector",
                          f"{host.config.kv_connector!r} is not an LMCache connector "
                          f"of vLLM {host.config.vllm_version}",
                          f"use one of {sorted(table.lmcache_connectors)} (exact spelling)")
        for field in sorted(set(host.config.vllm_kv_transfer_extra) - table.kv_transfer_fields):
            yield Problem(_src(site, host, "vllm_kv_transfer_extra"),
                          f"vllm_kv_transfer_extra.{field}",
                          f"vLLM {host.config.vllm_version} rejects this field",
                          f"remove it (accepted: {', '.join(sorted(table.kv_transfer_fields))})")


def _chunk_hash_problems(site: Site, host: Host, table: compat.LMCacheCompat
                         ) -> Iterator[Problem]:
    """The chunk-key hash: one the pinned LMCache can key by, set only by its setting."""
    alg = host.config.lmcache_pre_caching_hash_algorithm
    if alg not in table.pre_caching_hashes:
        yield Problem(_src(site, host, "lmcache_pre_caching_hash_algorithm"),
                      "lmcache_pre_caching_hash_algorithm",
                      f"LMCache {host.config.lmcache_version} cannot key chunks by {alg}",
                      f"use {' or '.join(table.pre_caching_hashes)}, or pin lmcache_version "
                      "0.4 or later")
    if "pre_caching_hash_algorithm" in host.config.lmcache_extra_config:
        # LMCache reads it at the top level only: in extra_config it would be ignored
        yield Problem(_src(site, host, "lmcache_extra_config"),
                      "lmcache_extra_config.pre_caching_hash_algorithm",
                      "deploykit sets the chunk-key hash (LMCache ignores it in extra_config)",
                      "remove it; set lmcache_pre_caching_hash_algorithm instead")


@rule
def lmcache_extra_config_valid(site: Site) -> Iterator[Problem]:
    """Extra S3 keys must be ones the pinned LMCache reads (it ignores others silently)."""
    for host in site.group("vllm"):
        try:
            table = compat.lmcache(host.config.lmcache_version)
        except ValueError:
            continue
        src = _src(site, host, "lmcache_extra_config")
        for key in sorted(host.config.lmcache_extra_config):
            if key in table.s3_dead_keys:
                yield Problem(src, f"lmcache_extra_config.{key}",
                              f"LMCache {host.config.lmcache_version} no longer reads it "
                              "(silently ignored)", "remove it")
            elif key.startswith("s3_") and key not in table.s3_extra_keys:
                yield Problem(src, f"lmcache_extra_config.{key}",
                              f"not an S3 key of LMCache {host.config.lmcache_version}",
                              f"use one of {', '.join(sorted(table.s3_extra_keys))}")
        yield from _chunk_hash_problems(site, host, table)
        if host.config.lmcache_extra_config.get("save_chunk_meta"):
            yield Problem(src, "lmcache_extra_config.save_chunk_meta",
                          "must be false for S3", "remove it")
        if host.config.lmcache_mode == "nixl" and not table.nixl_storage:
            yield Problem(_src(site, host, "lmcache_mode"), "lmcache_mode",
                          f"LMCache {host.config.lmcache_version} has no NIXL storage backend",
                          "pin lmcache_version 0.4 or later, or use lmcache_mode s3")


def _nixl_dram_only(lmcache_version: str, backend: str) -> bool:
    try:
        return backend in compat.lmcache(lmcache_version).nixl_dram_only_backends
    except ValueError:  # an unknown LMCache: versions_supported reports it
        return False


@rule
def nixl_buffer_aligned(site: Site) -> Iterator[Problem]:
    """A NIXL buffer on the GPU needs a backend that registers VRAM and must hold whole
    chunks; on the CPU it must not be set."""
    for host in site.group("vllm"):
        c = host.config
        if c.lmcache_mode != "nixl" or host.geometry is None:
            continue
        src = _src(site, host, "lmcache_nixl_buffer_size")
        if c.lmcache_nixl_buffer_device == "cpu":
            if c.lmcache_nixl_buffer_size is not None:
                yield Problem(src, "lmcache_nixl_buffer_size",
                              "must not be set with lmcache_nixl_buffer_device cpu",
                              "remove it (the CPU pool is max_local_cpu_size)")
            # only an explicit 0 (nixl mode's default pool is 50 GB); lmcache 0.5.6's
            # NixlStorageBackend raises at start without a CPU pool
            if c.lmcache_max_local_cpu_size == 0:
                yield Problem(_src(site, host, "lmcache_max_local_cpu_size"),
                              "lmcache_max_local_cpu_size",
                              "is 0, but with lmcache_nixl_buffer_device cpu NIXL stages "
                              "every transfer in LMCache's CPU pool",
                              "give it the staging size in GB, e.g. 5")
            continue
        if c.vllm_accelerator not in ("cuda", "rocm", None):
            # a `cuda` buffer is device memory NIXL registers through CUDA: Gaudi and CPU
            # hosts have none (NIXL's OBJ plugin there stages in DRAM)
            yield Problem(_src(site, host, "lmcache_nixl_buffer_device"),
                          "lmcache_nixl_buffer_device",
                          f"cuda on a {c.vllm_accelerator} host, which has no CUDA memory",
                          "use lmcache_nixl_buffer_device: cpu", hosts=(host.name,))
            continue
        if _nixl_dram_only(c.lmcache_version, c.lmcache_nixl_backend):
            pinned = ", ".join(compat.lmcache(c.lmcache_version).nixl_packages) or "NIXL"
            yield Problem(_src(site, host, "lmcache_nixl_buffer_device"),
                          "lmcache_nixl_buffer_device",
                          f"cuda with NIXL's {c.lmcache_nixl_backend} backend: its engines "
                          "register host memory only (VRAM needs a cuObject "
                          f"engine, which {pinned} lacks), so LMCache's NIXL storage fails "
                          "at init", "use lmcache_nixl_buffer_device: cpu", hosts=(host.name,))
            continue
        try:
            layout = chunk_layout(host.geometry, chunk_tokens=c.lmcache_chunk_size,
                                  tensor_parallel=c.vllm_tensor_parallel_size,
                                  pipeline_parallel=c.vllm_pipeline_parallel_size,
                                  dtype_bytes=kv_dtype_bytes(host.geometry,
                                                             c.vllm_kv_cache_dtype))
        except ValueError:  # TP does not fit the KV heads: tensor_parallel_fits_kv_heads
            continue
        size = c.lmcache_nixl_buffer_size
        if size is None or size % layout.object_bytes:
            fixed = max(1, -(-(size or 0) // layout.object_bytes)) * layout.object_bytes
            yield Problem(src, "lmcache_nixl_buffer_size",
                          f"{size} is not a multiple of the chunk object size "
                          f"{layout.object_bytes} on {host.name}", f"use {fixed}")


@rule
def lmcache_top_level_known(site: Site) -> Iterator[Problem]:
    """lmcache_top_level_config and lmcache_min_retrieve_tokens: keys the pinned LMCache reads
    (data/lmcache_keys.yaml), in the topology that reads lmcache.yaml (knobs.py refuses the
    keys deploykit renders)."""
    for host in site.group("vllm"):
        c = host.config
        if not c.lmcache_top_level_config and not c.lmcache_min_retrieve_tokens:
            continue
        try:
            known = compat.lmcache_top_level_keys(c.lmcache_version)
        except ValueError:
            continue  # versions_supported reports it
        if c.lmcache_server:
            for key in ("lmcache_top_level_config", "lmcache_min_retrieve_tokens"):
                if getattr(c, key):
                    yield Problem(_src(site, host, key), key,
                                  f"the {c.lmcache_topology} topology has no lmcache.yaml "
                                  "(vLLM's LMCacheMPConnector reads neither; the server "
                                  "takes flags)", "remove it, or use lmcache_topology "
                                  "inprocess", hosts=(host.name,))
            continue
        if c.lmcache_min_retrieve_tokens and "min_retrieve_tokens" not in known:
            yield Problem(_src(site, host, "lmcache_min_retrieve_tokens"),
                          "lmcache_min_retrieve_tokens",
                          f"LMCache {c.lmcache_version} has no min_retrieve_tokens "
                          "(0.3.14 and later)", "remove it, or pin a newer lmcache_version",
                          hosts=(host.name,))
        src = _src(site, host, "lmcache_top_level_config")
        for key in sorted(c.lmcache_top_level_config):
            if key == "extra_config":
                yield Problem(src, "lmcache_top_level_config.extra_config",
                              "extra_config has its own setting",
                              "move its keys to lmcache_extra_config", hosts=(host.name,))
            elif key not in known:
                yield Problem(src, f"lmcache_top_level_config.{key}",
                              f"not a key of LMCache {c.lmcache_version} (it would be "
                              "ignored)", "remove it, or check the spelling against "
                              "lmcache/v1/config.py", hosts=(host.name,))


# S3's smallest multipart part; NIXL's CRT client uses crtMinLimit as its part size and clamps
# a smaller one up with a warning (nixl v1.4.0 src/plugins/obj/README.md:85)
_CRT_MIN_PART = 5 * 1024**2


@rule
def nixl_crt_min_limit_fits(site: Site) -> Iterator[Problem]:
    """lmcache_nixl_crt_min_limit: 0 (off), or at least 5 MiB and at most the chunk object
    (a larger limit keeps every object on the plain S3 client)."""
    for host in site.group("vllm"):
        c = host.config
        limit = c.lmcache_nixl_crt_min_limit
        if c.lmcache_mode != "nixl" or not limit:
            continue
        src = _src(site, host, "lmcache_nixl_crt_min_limit")
        if limit < _CRT_MIN_PART:
            yield Problem(src, "lmcache_nixl_crt_min_limit",
                          f"{limit} is below S3's 5 MiB part (the CRT client clamps it)",
                          f"use at least {_CRT_MIN_PART}, or 0 to keep the CRT client off",
                          hosts=(host.name,))
            continue
        if host.geometry is None:
            continue
        try:
            size = chunk_layout(host.geometry, chunk_tokens=c.lmcache_chunk_size,
                                tensor_parallel=c.vllm_tensor_parallel_size,
                                pipeline_parallel=c.vllm_pipeline_parallel_size,
                                dtype_bytes=kv_dtype_bytes(host.geometry,
                                                           c.vllm_kv_cache_dtype)).object_bytes
        except ValueError:
            continue
        if limit > size:
            yield Problem(src, "lmcache_nixl_crt_min_limit",
                          f"{limit} is above the chunk object size {size} on {host.name}: "
                          "no object would use the CRT client",
                          f"use at most {size}, or unset it", hosts=(host.name,))


@rule
def mla_single_stage(site: Site) -> Iterator[Problem]:
    """MLA models store one object from rank 0; deploykit does not model MLA with PP > 1."""
    for host in site.group("vllm"):
        if host.geometry and host.geometry.mla and host.config.vllm_pipeline_parallel_size > 1:
            yield Problem(_src(site, host, "vllm_pipeline_parallel_size"),
                          "vllm_pipeline_parallel_size",
                          "pipeline parallelism with an MLA model is not supported",
                          "use vllm_pipeline_parallel_size: 1")


@rule
def chunk_within_max_model_len(site: Site) -> Iterator[Problem]:
    """A chunk longer than the context is never full: nothing would ever be stored."""
    for host in site.group("vllm"):
        c = host.config
        if c.vllm_max_model_len is not None and c.lmcache_chunk_size > c.vllm_max_model_len:
            yield Problem(_src(site, host, "lmcache_chunk_size"), "lmcache_chunk_size",
                          f"{c.lmcache_chunk_size} tokens > vllm_max_model_len "
                          f"{c.vllm_max_model_len} (no chunk is ever full, nothing is cached)",
                          f"use at most {c.vllm_max_model_len}", hosts=(host.name,))

