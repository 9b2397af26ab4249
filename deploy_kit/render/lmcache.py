"""LMCache YAML for the pinned version and mode, built as data and serialised."""

from __future__ import annotations

from typing import Any

import yaml

from deploy_kit.config.models import HostConfig
from deploy_kit.config.names import HEADER, endpoint_url, remote_url
from deploy_kit.core import compat
from deploy_kit.core.geometry import ModelGeometry, chunk_layout, kv_dtype_bytes
from deploy_kit.plan.breakeven import min_retrieve_tokens
from deploy_kit.plan.sizing import AWSCRT_PART_BYTES, local_cpu, max_local_cpu_gb


def _s3_extra(c: HostConfig) -> dict[str, Any]:
    table = compat.lmcache(c.lmcache_version)
    extra: dict[str, Any] = {"s3_region": c.deploykit_s3_region}
    if table.series == "0.3":
        extra |= {"s3_max_io_concurrency": c.lmcache_s3_max_inflight_reqs,
                  "s3_max_inflight_reqs": c.lmcache_s3_max_inflight_reqs}
    else:
        extra["s3_num_io_threads"] = c.lmcache_s3_num_io_threads
    extra |= {"s3_prefer_http2": c.lmcache_s3_prefer_http2, "s3_enable_s3express": False}
    if table.s3_tls_default_on and not c.deploykit_s3_tls:
        extra["disable_tls"] = True  # 0.4+ speaks TLS by default; every request fails on HTTP
    elif "disable_tls" in table.s3_extra_keys and c.deploykit_s3_tls:
        extra["disable_tls"] = False  # explicit: TLS to the concentrators, whatever the default
    extra["save_chunk_meta"] = False
    return extra


# S3's smallest multipart part: below it the CRT SDK clamps the part size up and warns
# (nixl v1.4.0 src/plugins/obj/README.md:85, s3_crt/client.cpp:31-41)
CRT_MIN_PART_BYTES = 5 * 1024**2


def object_bytes(c: HostConfig, geometry: ModelGeometry | None) -> int | None:
    """Bytes of one stored chunk object (what the planner computes); None: no geometry."""
    if geometry is None:
        return None
    try:
        return chunk_layout(geometry, chunk_tokens=c.lmcache_chunk_size,
                            tensor_parallel=c.vllm_tensor_parallel_size,
                            pipeline_parallel=c.vllm_pipeline_parallel_size,
                            dtype_bytes=kv_dtype_bytes(geometry, c.vllm_kv_cache_dtype)
                            ).object_bytes
    except ValueError:  # TP does not fit the KV heads: a rule reports it
        return None


def crt_min_limit(c: HostConfig, geometry: ModelGeometry | None) -> int | None:
    """NIXL OBJ's crtMinLimit: the setting, else the chunk object size capped at awscrt's
    8 MiB default part (so a large object is read as parallel ranged GETs over several
    connections) and at least S3's 5 MiB part; None: the CRT client stays off."""
    if c.lmcache_nixl_crt_min_limit is not None:
        return c.lmcache_nixl_crt_min_limit or None
    size = object_bytes(c, geometry)
    if size is None or size < CRT_MIN_PART_BYTES:
        return None  # a small object is one PUT/GET on the plain client: nothing to gain
    return min(size, AWSCRT_PART_BYTES)


def _nixl_string(value: Any) -> str:
    """NIXL's backend params are a map of strings (nixl_b_params_t); its parser reads
    true/false for booleans (nixl v1.4.0 src/utils/common/config_traits.h:39-51)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _nixl_extra(c: HostConfig, geometry: ModelGeometry | None = None) -> dict[str, Any]:
    params = {  # NIXL passes these to its OBJ plugin unchanged; all values are strings
        "endpoint_override": endpoint_url(c),
        "scheme": "https" if c.deploykit_s3_tls else "http",
        "region": c.deploykit_s3_region,
        "bucket": c.cache_bucket,
        # checksums only where S3 requires them, both ways, as in the AWS profile
        # (nixl src/utils/object/s3/utils.h: "required" -> WHEN_REQUIRED)
        "req_checksum": "required",
        "resp_checksum": "required",
    }
    if c.deploykit_s3_tls:
        # nixl-cu12/cu13 1.5.1 bundle a libcurl built on manylinux_2_28 whose default CA file
        # is /etc/pki/tls/certs/ca-bundle.crt (strings libcurl-*.so.4.8.0): absent on Debian
        # and Ubuntu, so every https request fails without an explicit bundle. This is the
        # system store deploykit adds its CA to (lmcache_nixl_ca_bundle: RHEL keeps it at
        # /etc/pki/tls/certs/ca-bundle.crt).
        params["ca_bundle"] = c.lmcache_nixl_ca_bundle
    limit = crt_min_limit(c, geometry)
    if limit is not None:
        # objects >= crtMinLimit use S3CrtClient (multipart, several connections): the
        # multi-path client the seed found missing (nixl v1.4.0 s3_crt/engine_impl.cpp:56)
        params["crtMinLimit"] = str(limit)
        # whole Gbit/s; the CRT sizes its connection count from it (default 10: nixl v1.4.0
        # README.md:73,87, s3_crt/client.cpp:43-47 reads it as size_t)
        params["throughput_target_gbps"] = str(max(1, round(c.deploykit_storage_gbps)))
    return {"enable_nixl_storage": True, "nixl_backend": c.lmcache_nixl_backend,
            "nixl_pool_size": c.lmcache_nixl_pool_size, "nixl_backend_params": params}


# Top-level keys deploykit renders from its own settings: LMCache reads them only at the
# top level, so a copy inside lmcache_extra_config is refused (render/knobs.py).
OWNED_TOP_LEVEL_KEYS = frozenset({
    "chunk_size", "local_cpu", "max_local_cpu_size", "remote_url", "remote_serde",
    "nixl_buffer_device", "nixl_buffer_size", "local_disk", "max_local_disk_size",
    "pre_caching_hash_algorithm", "save_unfull_chunk", "enable_async_loading",
    "blocking_timeout_secs", "min_retrieve_tokens"})


NIXL_PARAMS = "nixl_backend_params"


def merge_extra(extra: dict[str, Any], user: dict[str, Any]) -> dict[str, Any]:
    """lmcache_extra_config over the rendered extra_config: keys replace, except NIXL's
    backend params, merged key by key (values as the strings NIXL reads) so a site can add
    one OBJ parameter without restating the endpoint, bucket and TLS deploykit renders."""
    merged = extra | {k: v for k, v in user.items() if k != NIXL_PARAMS}
    params = user.get(NIXL_PARAMS)
    if isinstance(params, dict):
        ours = extra.get(NIXL_PARAMS)
        rendered: dict[str, Any] = ours if isinstance(ours, dict) else {}
        merged[NIXL_PARAMS] = rendered | {str(k): _nixl_string(v) for k, v in params.items()}
    elif params is not None:
        merged[NIXL_PARAMS] = params  # not a mapping: passed on, LMCache reports it
    return merged


def build_lmcache_config(c: HostConfig, geometry: ModelGeometry | None = None
                         ) -> dict[str, Any]:
    """Keys in LMCache's own order of importance; extra_config last, user keys merged in."""
    cfg: dict[str, Any] = {
        "chunk_size": c.lmcache_chunk_size,
        "local_cpu": local_cpu(c),
        "max_local_cpu_size": max_local_cpu_gb(c),
    }
    extra: dict[str, Any] = {}
    if c.lmcache_mode == "s3":
        cfg["remote_url"] = remote_url(c)
        cfg["remote_serde"] = c.lmcache_remote_serde
        extra = _s3_extra(c)
    elif c.lmcache_mode == "nixl":
        cfg["remote_serde"] = c.lmcache_remote_serde
        cfg["nixl_buffer_device"] = c.lmcache_nixl_buffer_device
        if c.lmcache_nixl_buffer_device == "cuda":
            cfg["nixl_buffer_size"] = c.lmcache_nixl_buffer_size
        extra = _nixl_extra(c, geometry)
    elif c.lmcache_mode == "disk":
        cfg["local_disk"] = f"file://{c.lmcache_disk_path.rstrip('/')}/"
        cfg["max_local_disk_size"] = c.lmcache_max_local_disk_size
    # top level (LMCache never reads it from extra_config); builtin is written out too, so
    # the file says which hash keys the chunks
    cfg["pre_caching_hash_algorithm"] = c.lmcache_pre_caching_hash_algorithm
    cfg["save_unfull_chunk"] = c.lmcache_save_unfull_chunk
    cfg["enable_async_loading"] = c.lmcache_enable_async_loading
    cfg["blocking_timeout_secs"] = c.lmcache_blocking_timeout_secs
    retrieve = min_retrieve_tokens(c, geometry)
    if retrieve is not None:
        cfg["min_retrieve_tokens"] = retrieve
    cfg |= {k: v for k, v in c.lmcache_top_level_config.items() if k not in cfg}
    extra = merge_extra(extra, c.lmcache_extra_config)
    if extra:
        cfg["extra_config"] = extra
    return cfg


# libyaml's emitter when PyYAML has it: 10× faster than the pure-Python one, same output
_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def dump_yaml(data: dict[str, Any]) -> str:
    return f"# {HEADER}\n" + yaml.dump(data, Dumper=_DUMPER, sort_keys=False,
                                         default_flow_style=False)


def render_lmcache_yaml(c: HostConfig, geometry: ModelGeometry | None = None) -> str:
    return dump_yaml(build_lmcache_config(c, geometry))
