"""Accelerators: a vLLM build for each host's accelerator and an LMCache topology that runs
there, the device model against the runtime, Gaudi bucketing; and two plan warnings (not
rules): wheels off PyPI, and LMCache's torch against vLLM's."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from deploy_kit.config.rulebook import collector
from deploy_kit.config.rulebook import src as _src
from deploy_kit.config.site import Host, Site
from deploy_kit.core import compat
from deploy_kit.core.errors import Problem

RULES, rule = collector()


_TOPOLOGY_EVIDENCE = {
    "cpu": "LMCache's in-process connector has no CPU path and silently recomputes every "
           "prefix (0 hits)",
    "gaudi3": "LMCache {lmcache}'s HPU device spec has no lmcache_driven MP transfer "
              "(v1/platform/devices/hpu/__init__.py: the base spec's False), which "
              "`lmcache server` needs",
}


def _topology_runs(site: Site, host: Host, table: compat.VLLMCompat) -> Iterator[Problem]:
    """The topology must run with both the pinned vLLM and the pinned LMCache there."""
    c = host.config
    accelerator = c.vllm_accelerator or "cuda"
    allowed = table.topologies_for(accelerator)
    with contextlib.suppress(ValueError):  # unsupported lmcache: versions_supported reports it
        allowed = [t for t in allowed
                   if t in compat.lmcache(c.lmcache_version).topologies_for(accelerator)]
    if c.lmcache_topology in allowed:
        return
    evidence = _TOPOLOGY_EVIDENCE.get(accelerator, "not in compat.yaml `topologies`")
    yield Problem(_src(site, host, "lmcache_topology"), "lmcache_topology",
                  f"{c.lmcache_topology} does not work on {accelerator} hosts: "
                  + evidence.format(lmcache=c.lmcache_version),
                  f"set lmcache_topology: {allowed[0]}" if allowed else
                  "pin an LMCache and vLLM with a topology for this accelerator",
                  hosts=(host.name,))


def _pinned_vllm_hosts(site: Site) -> Iterator[tuple[Host, str, compat.VLLMCompat]]:
    """Serving hosts with an accelerator and a vLLM the table knows (versions_supported and
    groups_present report the others)."""
    for host in site.group("vllm"):
        accelerator = host.config.vllm_accelerator
        if accelerator is None:
            continue
        try:
            table = compat.vllm(host.config.vllm_version)
        except ValueError:
            continue
        yield host, accelerator, table


def accelerator_wheels_available(site: Site) -> Iterator[Problem]:
    """ROCm and Gaudi3 builds are not on PyPI: they install from the site's wheel directory.
    A plan warning (not a rule: a site may install them out of band); the serving role
    refuses to install from PyPI there."""
    for host, accelerator, table in _pinned_vllm_hosts(site):
        c = host.config
        if not table.needs_wheelhouse(accelerator):
            continue
        wanted = ", ".join(table.packages(accelerator, c.vllm_version))
        if c.vllm_install and not c.vllm_wheel_dir:
            yield Problem(_src(site, host, "vllm_wheel_dir"), "vllm_wheel_dir",
                          f"{host.name} ({c.vllm_accelerator}) needs {wanted} from the site's "
                          "artefact source; PyPI has only the CUDA build"
                          + (" and no vllm-gaudi" if c.vllm_accelerator == "gaudi3" else ""),
                          "set vllm_wheel_dir to a directory of wheels built for the accelerator")
        if c.lmcache_install and not c.lmcache_wheel_dir:
            yield Problem(_src(site, host, "lmcache_wheel_dir"), "lmcache_wheel_dir",
                          f"{host.name} ({c.vllm_accelerator}) needs an LMCache "
                          f"{c.lmcache_version} build for it; PyPI's wheel is built for CUDA",
                          "set lmcache_wheel_dir to the site's wheel directory")


def _torch_mismatches(site: Site) -> Iterator[tuple[Host, str, str, str | None]]:
    """Hosts whose LMCache comes from PyPI (its C extensions link the torch they were built
    against) under a vLLM pinning another torch: (host, built, pinned, missing symbol when
    that pairing is measured to break). A site's own wheel (lmcache_wheel_dir) is built
    against the site's torch; a wheelhouse accelerator's LMCache is the site's own; CPU
    hosts never load the CUDA extension."""
    for host, accelerator, table in _pinned_vllm_hosts(site):
        c = host.config
        try:
            lmcache = compat.lmcache(c.lmcache_version)
        except ValueError:
            continue
        built = lmcache.build_torch
        if not c.lmcache_install or c.lmcache_wheel_dir or accelerator == "cpu" or \
                table.needs_wheelhouse(accelerator) or built is None or table.torch is None \
                or built == table.torch:
            continue
        yield host, built, table.torch, (lmcache.build_torch_breaks or {}).get(table.torch)


@rule
def lmcache_extension_loads(site: Site) -> Iterator[Problem]:
    """PyPI's LMCache under a vLLM whose torch lacks a symbol its extension needs (measured
    with nm, compat.yaml `build_torch_breaks`) runs on LMCache's pure-torch fallback: slow
    KV copies, silent apart from one log line. Refused, naming both ways out."""
    for host, built, pinned, symbol in _torch_mismatches(site):
        if symbol is None:
            continue
        c = host.config
        default = compat.default_vllm_version(c.vllm_accelerator or "cuda")
        yield Problem(_src(site, host, "vllm_version"), "vllm_version",
                      f"vLLM {c.vllm_version} pins torch {pinned}, which lacks {symbol} that "
                      f"PyPI's LMCache {c.lmcache_version} cuda_ops needs (built against torch "
                      f"{built}): LMCache would copy KV on its slow pure-torch fallback",
                      (f"set vllm_version {default} (torch {built}), or " if default else "")
                      + f"set lmcache_wheel_dir to an LMCache {c.lmcache_version} built "
                      f"against torch {pinned}", hosts=(host.name,))


def torch_pairing(site: Site) -> Iterator[Problem]:
    """A pairing not measured either way: a plan warning, not a rule (LMCache #585, #1294,
    #1712 broke on particular symbols, not on every minor)."""
    for host, built, pinned, symbol in _torch_mismatches(site):
        if symbol is not None:
            continue  # lmcache_extension_loads refuses it
        c = host.config
        yield Problem(_src(site, host, "lmcache_version"), "lmcache_version",
                      f"PyPI's LMCache {c.lmcache_version} C extensions are built against "
                      f"torch {built}, vLLM {c.vllm_version} pins torch {pinned} "
                      f"({host.name}): `import lmcache.cuda_ops` may fail with undefined "
                      "symbols (not checked for this pair)",
                      f"pin a vLLM on torch {built}, or build LMCache against torch "
                      f"{pinned} into lmcache_wheel_dir", hosts=(host.name,))


@rule
def gaudi_bucketing_supported(site: Site) -> Iterator[Problem]:
    """The padding-aware strategy needs VLLM_BUCKETING_STRATEGY (vllm-gaudi 0.20 and later)."""
    for host in site.group("vllm"):
        c = host.config
        if c.vllm_accelerator != "gaudi3" or c.vllm_gaudi_bucketing_strategy != "pad":
            continue
        try:
            table = compat.vllm(c.vllm_version)
        except ValueError:
            continue
        if table.gaudi_bucketing_env != "VLLM_BUCKETING_STRATEGY":
            yield Problem(_src(site, host, "vllm_gaudi_bucketing_strategy"),
                          "vllm_gaudi_bucketing_strategy",
                          f"vLLM {c.vllm_version}'s vllm-gaudi has no padding-aware bucketing",
                          "use exp or lin")


# The connector each topology loads (vllm/distributed/kv_transfer/kv_connector/factory.py)
TOPOLOGY_CONNECTOR = {"inprocess": "LMCacheConnectorV1", "server": "LMCacheMPConnector"}


@rule
def accelerator_supported(site: Site) -> Iterator[Problem]:
    """The pinned vLLM must have a build for the accelerator, and LMCache a topology that
    works there: the in-process connector has no CPU path and silently recomputes."""
    for host, _accelerator, table in _pinned_vllm_hosts(site):
        c = host.config
        if c.vllm_accelerator not in table.accelerators:
            rows = [s for s in compat.supported_series("vllm")
                    if c.vllm_accelerator in compat.vllm(f"{s}.0").accelerators]
            why = compat.missing_build_reason(str(c.vllm_accelerator)) or \
                "none in the compatibility table"
            yield Problem(_src(site, host, "vllm_version"), "vllm_version",
                          f"vLLM {c.vllm_version} has no {c.vllm_accelerator} build: {why}",
                          f"pin a {' or '.join(f'{s}.x' for s in rows) or 'supported'} "
                          f"vllm_version for {c.vllm_accelerator} hosts", hosts=(host.name,))
            continue
        yield from _topology_runs(site, host, table)
        if c.vllm_kv_connector and c.vllm_kv_connector in TOPOLOGY_CONNECTOR.values() and \
                c.vllm_kv_connector != TOPOLOGY_CONNECTOR[c.lmcache_topology]:
            yield Problem(_src(site, host, "vllm_kv_connector"), "vllm_kv_connector",
                          f"{c.vllm_kv_connector} does not talk to lmcache_topology "
                          f"{c.lmcache_topology}",
                          "leave vllm_kv_connector unset (it follows the topology)",
                          hosts=(host.name,))
        if c.lmcache_server and c.lmcache_mode == "nixl":
            yield Problem(_src(site, host, "lmcache_mode"), "lmcache_mode",
                          "the LMCache server's NIXL L2 adapter keeps OBJ objects under "
                          "per-process pool keys (lmcache 0.5.6 nixl_store_l2_adapter.py): "
                          "no other host or restart finds them",
                          "use lmcache_mode s3 with lmcache_topology server", hosts=(host.name,))
        multiple = (table.block_size_multiple or {}).get(c.vllm_accelerator)
        if multiple and c.vllm_block_size is not None and c.vllm_block_size % multiple:
            yield Problem(_src(site, host, "vllm_block_size"), "vllm_block_size",
                          f"{c.vllm_block_size} on {c.vllm_accelerator}: vLLM's CPU attention "
                          f"needs a multiple of {multiple}",
                          f"leave it unset ({table.default_block_size[c.vllm_accelerator]}) or "
                          f"use a multiple of {multiple}", hosts=(host.name,))


@rule
def accelerator_model_matches(site: Site) -> Iterator[Problem]:
    """vllm_accelerator_model must be a device of vllm_accelerator (an h100 has no ROCm)."""
    for host in site.group("vllm"):
        c = host.config
        if c.vllm_accelerator is None or c.vllm_accelerator_model is None:
            continue
        runtime = compat.accelerator_models()[c.vllm_accelerator_model].runtime
        if runtime != c.vllm_accelerator:
            fitting = sorted(n for n, m in compat.accelerator_models().items()
                             if m.runtime == c.vllm_accelerator)
            yield Problem(_src(site, host, "vllm_accelerator_model"), "vllm_accelerator_model",
                          f"{c.vllm_accelerator_model} runs {runtime}, but the host's "
                          f"vllm_accelerator is {c.vllm_accelerator}",
                          f"use one of {', '.join(fitting)}, or fix vllm_accelerator",
                          hosts=(host.name,))

