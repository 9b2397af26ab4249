"""Version compatibility table: what each supported LMCache / vLLM / Ceph version accepts."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import yaml

ACCELERATORS = ("cuda", "rocm", "gaudi3")


def parse_version(text: str) -> tuple[int, ...]:
    """'0.5.6' -> (0, 5, 6); raises ValueError on anything that is not dotted integers."""
    parts = text.strip().split(".")
    if not parts or not all(p.isdigit() for p in parts):
        raise ValueError(f"not a dotted version: {text!r}")
    return tuple(int(p) for p in parts)


@dataclass(frozen=True)
class LMCacheCompat:
    series: str
    s3_extra_keys: frozenset[str]
    s3_required_keys: frozenset[str]
    s3_dead_keys: frozenset[str]
    s3_tls_default_on: bool
    s3_shm_files_per_worker: int
    nixl_storage: bool


@dataclass(frozen=True)
class VLLMCompat:
    series: str
    kv_transfer_fields: frozenset[str]
    rope_scaling_flag: str | None
    default_gpu_memory_utilization: float
    lmcache_connectors: frozenset[str]
    default_block_size: dict[str, int]


@dataclass(frozen=True)
class CephCompat:
    version: tuple[int, ...]
    release: str
    has_concentrator: bool
    has_noautoscale_flag: bool


class UnsupportedVersion(ValueError):
    """A pinned version that the compatibility table does not know."""


@cache
def _table() -> dict[str, Any]:
    text = resources.files("deploy_kit").joinpath("data/compat.yaml").read_text()
    data: dict[str, Any] = yaml.safe_load(text)
    return data


def _series_entry(component: str, version: str) -> tuple[str, dict[str, Any]]:
    wanted = parse_version(version)
    for series, entry in _table()[component].items():
        if wanted[: len(parse_version(series))] == parse_version(series):
            return series, entry
    known = ", ".join(f"{s}.x" for s in _table()[component])
    raise UnsupportedVersion(f"{component} {version} is not supported (supported: {known})")


def supported_series(component: str) -> list[str]:
    return list(_table()[component])


@cache
def lmcache(version: str) -> LMCacheCompat:
    series, e = _series_entry("lmcache", version)
    return LMCacheCompat(
        series=series,
        s3_extra_keys=frozenset(e["s3_extra_keys"]),
        s3_required_keys=frozenset(e["s3_required_keys"]),
        s3_dead_keys=frozenset(e["s3_dead_keys"]),
        s3_tls_default_on=bool(e["s3_tls_default_on"]),
        s3_shm_files_per_worker=int(e["s3_shm_files_per_worker"]),
        nixl_storage=bool(e["nixl_storage"]),
    )


@cache
def vllm(version: str) -> VLLMCompat:
    series, e = _series_entry("vllm", version)
    return VLLMCompat(
        series=series,
        kv_transfer_fields=frozenset(e["kv_transfer_fields"]),
        rope_scaling_flag=e["rope_scaling_flag"],
        default_gpu_memory_utilization=float(e["default_gpu_memory_utilization"]),
        lmcache_connectors=frozenset(e["lmcache_connectors"]),
        default_block_size=dict(e["default_block_size"]),
    )


@cache
def ceph(version: str) -> CephCompat:
    table = _table()["ceph"]
    parsed = parse_version(version)
    release = table["releases"].get(str(parsed[0]))
    if release is None:
        known = ", ".join(f"{k} ({v})" for k, v in table["releases"].items())
        raise UnsupportedVersion(f"ceph {version} is not supported (supported majors: {known})")
    return CephCompat(
        version=parsed,
        release=release,
        has_concentrator=parsed >= parse_version(table["concentrator_min"]),
        has_noautoscale_flag=parsed >= parse_version(table["noautoscale_flag_min"]),
    )
