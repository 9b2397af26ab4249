"""The site's shape and what every host must agree on: the groups a site needs, pinned
versions the compatibility table knows, site-wide values, and the values every host that
shares the bucket must share (or their cache keys never match)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from deploy_kit.config.models import HostConfig
from deploy_kit.config.rulebook import agree as _agree
from deploy_kit.config.rulebook import collector
from deploy_kit.config.rulebook import src as _src
from deploy_kit.config.site import PER_HOST_SETTINGS, Host, Site, comparable
from deploy_kit.core import compat
from deploy_kit.core.errors import Problem

RULES, rule = collector()


@rule
def groups_present(site: Site) -> Iterator[Problem]:
    """Every tier needs hosts: rgw and dns always, consul_servers in consul mode."""
    needed = ["rgw", "dns", "ceph_admin"]
    if site.settings.deploykit_dns_mode == "consul":
        needed.append("consul_servers")
    for group in needed:
        if not site.group(group) and not {group, "all"} & site.rejected_groups:
            yield Problem(site.hosts_file, group, "group has no hosts",
                          f"add at least one host under children: {group}:")
    for host in site.group("vllm"):
        if host.config.vllm_accelerator is None:
            yield Problem(_src(site, host, "vllm_accelerator"), "vllm_accelerator",
                          f"host {host.name} has no accelerator",
                          "set vllm_accelerator: cuda | rocm | gaudi3 | cpu")


@rule
def versions_supported(site: Site) -> Iterator[Problem]:
    """Pinned versions must be in the compatibility table (deploy_kit/data/compat.yaml)."""
    checks: list[tuple[str, Callable[[str], Any]]] = [
        ("lmcache_version", compat.lmcache), ("vllm_version", compat.vllm),
        ("deploykit_ceph_version", compat.ceph)]
    for host in site.hosts.values():
        for key, lookup in checks:
            value = getattr(host.config, key)
            try:
                lookup(value)
            except ValueError as exc:
                yield Problem(_src(site, host, key), key, str(exc),
                              "pin a supported version", hosts=(host.name,))


@rule
def site_values_agree(site: Site) -> Iterator[Problem]:
    """Site-wide values (SITE_KEYS: the S3 name, bucket, its bounds and identities, DNS mode,
    Consul datacenter, ...) are read from every host that sets them and must be one value:
    each other value is refused, naming where it is set and where the agreed one is."""
    for key, found in site.site_values.items():
        values = {comparable(value) for value, _, _ in found.setters}
        if len(values) < 2:
            continue
        agreed, agreed_source, agreed_hosts = found.setters[0]
        for value, source, hosts in found.setters:
            if comparable(value) == comparable(agreed):
                continue
            yield Problem(source, key,
                          f"{_shown(value)} on {_names(hosts)}, but {agreed_source} sets "
                          f"{_shown(agreed)} on {_names(agreed_hosts)} (one value for the site)",
                          "set it once, in group_vars/all.yml (or the same value in both)",
                          hosts=hosts[:1] + agreed_hosts[:1])


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _names(hosts: tuple[str, ...]) -> str:
    return ", ".join(hosts[:3]) + (f" (+{len(hosts) - 3})" if len(hosts) > 3 else "")


@rule
def gateways_agree(site: Site) -> Iterator[Problem]:
    """cephadm runs every gateway from one spec (the first gateway's daemon settings)."""
    gateways = site.group("rgw")
    if site.settings.ceph_rgw_mode != "cephadm":
        return
    keys = tuple(k for k in PER_HOST_SETTINGS if k.startswith("ceph_rgw_"))
    yield from _agree(site, gateways, keys, "every rgw host (cephadm applies one spec)")


@rule
def sharing_hosts_agree(site: Site) -> Iterator[Problem]:
    """Hosts of one model in one bucket (a sharing group: c.cache_bucket) share keys only
    with one seed, model, TP, dtype, chunk, topology and encryption. Hosts of different
    models share none: LMCache's keys start with the model (vLLM's --model), and each
    model's S3 identity may touch its own prefix only (config/s3_identities.py). Hosts in
    different buckets share nothing, so they may differ: Gaudi3 hosts in-process in a bucket
    of their own beside CUDA/ROCm hosts on the server topology (docs/teams.md)."""
    keys = ("vllm_python_hash_seed", "vllm_model", "vllm_tensor_parallel_size",
            "vllm_pipeline_parallel_size", "vllm_kv_cache_dtype", "lmcache_chunk_size",
            # the encryption settings too, across models: rules_encryption (per bucket)
            "lmcache_mode", "lmcache_topology", *IDENTITY_KEYS)
    by_group: dict[tuple[str, str], list[Host]] = {}
    for host in site.group("vllm"):
        c = host.config
        by_group.setdefault((c.cache_bucket, c.model_path_on_host), []).append(host)
    for (bucket, _), hosts in by_group.items():
        yield from _sharing_one_model(site, hosts, keys, bucket)


def _sharing_one_model(site: Site, hosts: list[Host], keys: tuple[str, ...], bucket: str
                       ) -> Iterator[Problem]:
    yield from _agree(site, hosts, keys, f"every vllm host of a model in bucket {bucket!r}")
    # the key format: in-process keys (<model>@<world>@<rank>@<hash>@<dtype>)
    # and the server's (<model>@<kv_rank>@<group>@<hash>) never match, and a new
    # LMCache series may change either (deploy_kit/cache/keys.py)
    series = {h.name: ".".join(h.config.lmcache_version.split(".")[:2]) for h in hosts}
    if len(set(series.values())) > 1:
        ordered = list(dict.fromkeys(series.values()))  # ties: the first host's series
        majority = max(ordered, key=list(series.values()).count)
        for host in hosts:
            if series[host.name] != majority:
                yield Problem(_src(site, host, "lmcache_version"), "lmcache_version",
                              f"{host.name} runs LMCache {series[host.name]}.x, others "
                              f"{majority}.x in bucket {bucket!r} (object keys differ "
                              "between series)",
                              "use one LMCache series on every vllm host (cache keys would "
                              "not match)", hosts=(host.name,))


# what else every sharing host must agree on (research/lmcache-vllm-facts.md, "Cross-host
# identity"): the weights' dtype and rope scaling change the KV of a prefix, the serde its
# bytes, the served name what clients ask for; the pre-caching hash (when the setting
# exists) the chunk keys. Not vllm_version: each accelerator pins its own vLLM (the example
# site's Gaudi hosts), and LMCache's key space is its series (checked below).
IDENTITY_KEYS = tuple(k for k in ("lmcache_remote_serde", "vllm_dtype", "vllm_rope_scaling",
                                  "vllm_served_model_name", "lmcache_pre_caching_hash_algorithm")
                      if k in HostConfig.model_fields)
