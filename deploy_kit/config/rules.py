"""Cross-host validation rules. Each rule is pure: Site in, problems out.

The same constraints are asserted again by the roles' preflight tasks, so plain
`ansible-playbook` runs are protected too; here they fail before any host is contacted.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from deploy_kit.config import (
    fit,
    rules_cache,
    rules_downloads,
    rules_monitoring,
    rules_network,
    rules_paths,
)
from deploy_kit.config.instances import DEVICE_ENV, instance_count, instances, workers
from deploy_kit.config.models import SECRET_KEYS, HostConfig, dns_name_problem
from deploy_kit.config.site import Host, Site
from deploy_kit.core import compat
from deploy_kit.core.errors import Problem
from deploy_kit.core.geometry import chunk_layout, kv_dtype_bytes

Rule = Callable[[Site], Iterator[Problem]]
RULES: list[Rule] = []


def rule(fn: Rule) -> Rule:
    RULES.append(fn)
    return fn


def validate_site(site: Site) -> list[Problem]:
    problems: list[Problem] = []
    for check in RULES:
        problems.extend(check(site))
    return sorted(set(problems))


def _src(site: Site, host: Host, key: str) -> str:
    return host.source(key, site.hosts_file)


def is_power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


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
    """Site-wide values (the S3 name, bucket, port, DNS mode) must be one value everywhere."""
    keys = ("deploykit_s3_fqdn", "deploykit_s3_bucket", "deploykit_s3_port",
            "deploykit_s3_region", "deploykit_dns_mode", "deploykit_s3_tls")
    yield from _agree(site, list(site.hosts.values()), keys, "every host")


@rule
def sharing_hosts_agree(site: Site) -> Iterator[Problem]:
    """Hosts that share the bucket share keys only with one seed, model, TP, dtype and chunk."""
    keys = ("vllm_python_hash_seed", "vllm_model", "vllm_tensor_parallel_size",
            "vllm_pipeline_parallel_size", "vllm_kv_cache_dtype", "lmcache_chunk_size",
            "lmcache_mode", "lmcache_topology", *IDENTITY_KEYS)
    hosts = site.group("vllm")
    yield from _agree(site, hosts, keys, "every vllm host")
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
                              f"{majority}.x (object keys differ between series)",
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


def _weight(site: Site, members: list[Host], key: str) -> tuple[int, int, int]:
    """How much a value is the fleet's: its hosts, then (a tie) fewest set in host_vars/
    (the odd one out is the per-host override), then most left at the default (a value
    set in hosts.yml for one host is the override, not the default it differs from)."""
    return (len(members), -sum("host_vars" in _src(site, h, key) for h in members),
            sum(key not in h.sources for h in members))


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


def _agree(site: Site, hosts: list[Host], keys: tuple[str, ...], scope: str
           ) -> Iterator[Problem]:
    if len(hosts) < 2:
        return
    for key in keys:
        try:  # the common case, one value fleet-wide: one C-level pass
            if len({getattr(h.config, key) for h in hosts}) < 2:
                continue
        except TypeError:  # a dict or list value: grouped below by its JSON
            pass
        values: dict[Any, list[Host]] = {}
        for host in hosts:
            value = getattr(host.config, key)
            if isinstance(value, dict | list):  # rope scaling: compared as its JSON
                value = json.dumps(value, sort_keys=True, default=str)
            values.setdefault(value, []).append(host)
        if len(values) > 1:
            majority = max(values, key=lambda v: _weight(site, values[v], key))
            for value, members in values.items():
                if value == majority:
                    continue
                for host in members:
                    yield Problem(_src(site, host, key), key,
                                  f"{host.name} has {value!r}, others have {majority!r}",
                                  f"use one value on {scope} (cache keys would not match)")


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


@rule
def nixl_buffer_aligned(site: Site) -> Iterator[Problem]:
    """A NIXL buffer on the GPU must hold whole chunks; on the CPU it must not be set."""
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
def pools_sane(site: Site) -> Iterator[Problem]:
    """Pool min_size <= size and pg_num a power of two (Ceph warns on anything else)."""
    for host in site.group("ceph_admin")[:1]:
        src = _src(site, host, "ceph_rgw_pools_list")
        names = [p.name for p in host.config.ceph_rgw_pools_list]
        for dup in sorted({n for n in names if names.count(n) > 1}):
            yield Problem(src, f"ceph_rgw_pools_list[{dup}]", "pool listed twice",
                          "keep one entry per pool")
        for pool in host.config.ceph_rgw_pools_list:
            key = f"ceph_rgw_pools_list[{pool.name}]"
            if pool.min_size > pool.size:
                yield Problem(src, f"{key}.min_size", f"{pool.min_size} > size {pool.size}",
                              f"use min_size <= {pool.size}")
            for field in ("pg_num", "pgp_num"):
                value = getattr(pool, field)
                if value is not None and not is_power_of_two(value):
                    lower = 1 << (value.bit_length() - 1)
                    yield Problem(src, f"{key}.{field}", f"{value} is not a power of two",
                                  f"use {lower} or {lower * 2}")


@rule
def rgw_multisite_complete(site: Site) -> Iterator[Problem]:
    """cephadm needs realm, zonegroup and zone together or none of them."""
    s = site.settings
    names = {"ceph_rgw_realm": s.ceph_rgw_realm, "ceph_rgw_zonegroup": s.ceph_rgw_zonegroup,
             "ceph_rgw_zone": s.ceph_rgw_zone}
    given = [k for k, v in names.items() if v]
    if given and len(given) < 3:
        missing = [k for k in names if k not in given]
        yield Problem(site.settings_source(given[0]), given[0],
                      f"set without {' and '.join(missing)} (cephadm fails the RGW service "
                      "on a missing one)", "set all three, or none for a single site")


@rule
def dns_upstream_not_itself(site: Site) -> Iterator[Problem]:
    """A CoreDNS host whose /etc/resolv.conf deploykit points at the site's CoreDNS (a
    serving host too) cannot take its upstream from that file: every other name would loop
    between the DNS servers until CoreDNS's `loop` plugin stops it."""
    for host in site.group("dns"):
        c = host.config
        if "vllm" in host.groups and c.resolver_manage and \
                "/etc/resolv.conf" in c.coredns_upstream:
            yield Problem(_src(site, host, "coredns_upstream"), "coredns_upstream",
                          f"{host.name} serves DNS and its /etc/resolv.conf is deploykit's "
                          "(it names the site's CoreDNS): the upstream would be itself",
                          "give the upstream resolvers' addresses, or resolver_manage: false "
                          "on this host", hosts=(host.name,))


@rule
def consul_quorum(site: Site) -> Iterator[Problem]:
    """bootstrap_expect cannot exceed the servers that exist, or Consul never elects."""
    servers = site.group("consul_servers")
    for host in servers:
        expect = host.config.consul_bootstrap_expect
        if expect is not None and expect > len(servers):
            yield Problem(_src(site, host, "consul_bootstrap_expect"),
                          "consul_bootstrap_expect",
                          f"{expect} > {len(servers)} hosts in consul_servers",
                          f"use at most {len(servers)}")
            return


@rule
def consul_node_names_usable(site: Site) -> Iterator[Problem]:
    """Every Consul agent's node name is its inventory name: a name Consul cannot serve, or
    two names one catalog treats as one node (its index ignores case), break registration."""
    if site.settings.deploykit_dns_mode != "consul":
        return
    agents = [h for h in site.hosts.values() if h.groups & {"rgw", "consul_servers"}]
    seen: dict[str, str] = {}
    for host in sorted(agents, key=lambda h: h.name):
        # host names (FQDN inventory names included); anything else (an underscore, a
        # space, a '/') makes Consul warn that DNS cannot name the node
        if dns_name_problem(host.name, min_labels=1):
            yield Problem(site.hosts_file, host.name, "is not a name Consul can give a node "
                          "(letters, digits, '-' and '.' only)",
                          "rename the host in the inventory (keep ansible_host as it is)",
                          hosts=(host.name,))
            continue
        other = seen.setdefault(host.name.lower(), host.name)
        if other != host.name:
            yield Problem(site.hosts_file, host.name, f"is the Consul node {other} (Consul "
                          "ignores case in node names)", "give each host a distinct name",
                          hosts=(other, host.name))

@rule
def rgw_fits_cores(site: Site) -> Iterator[Problem]:
    """RGW daemons per host must fit the host's cores."""
    for host in site.group("rgw"):
        cpus = host.config.ceph_rgw_host_cpus
        if cpus is not None and host.config.ceph_rgw_count_per_host > cpus:
            yield Problem(_src(site, host, "ceph_rgw_count_per_host"),
                          "ceph_rgw_count_per_host",
                          f"{host.config.ceph_rgw_count_per_host} daemons on {host.name} "
                          f"with {cpus} cores", f"use at most {cpus}")


@rule
def s3_name_consistent(site: Site) -> Iterator[Problem]:
    """The S3 name must be a DNS name under which <bucket>.<fqdn> can exist."""
    fqdn = site.settings.deploykit_s3_fqdn
    labels = fqdn.split(".")
    if len(labels) < 2 or not all(labels) or any(len(x) > 63 for x in labels):
        yield Problem(site.settings_source("deploykit_s3_fqdn"), "deploykit_s3_fqdn",
                      f"{fqdn!r} is not a fully qualified name",
                      "use a name such as s3.example.com")
    if "." in site.settings.deploykit_s3_bucket:
        yield Problem(site.settings_source("deploykit_s3_bucket"), "deploykit_s3_bucket",
                      "a dot in the bucket breaks virtual-hosted addressing",
                      "use letters, digits and dashes")


@rule
def coredns_answers_the_site(site: Site) -> Iterator[Problem]:
    """A coredns_allowed_networks list must hold every inventory host (each one's resolver
    asks the DNS hosts), and a coredns_bind of addresses the host's own address (the one
    resolv.conf names): else their lookups are refused or never arrive."""
    for dns in site.group("dns"):
        c = dns.config
        if c.coredns_allowed_networks is not None:
            nets = [ipaddress.ip_network(n) for n in c.coredns_allowed_networks]
            left_out = []
            for h in site.hosts.values():
                with contextlib.suppress(ValueError):
                    address = ipaddress.ip_address(h.address)
                    if not any(address in n for n in nets if n.version == address.version):
                        left_out.append(h.name)
            if left_out:
                yield Problem(_src(site, dns, "coredns_allowed_networks"),
                              "coredns_allowed_networks",
                              f"leaves out inventory hosts: CoreDNS on {dns.name} would refuse "
                              "their lookups", "add their addresses or networks",
                              hosts=tuple(sorted(left_out)))
        bind = c.coredns_bind or []
        addresses = []
        for entry in bind:
            with contextlib.suppress(ValueError):
                addresses.append(ipaddress.ip_address(entry))
        own = None
        with contextlib.suppress(ValueError):
            own = ipaddress.ip_address(dns.address)
        if own is not None and bind and len(addresses) == len(bind) and own not in addresses:
            yield Problem(_src(site, dns, "coredns_bind"), "coredns_bind",
                          f"does not hold {dns.name}'s address {dns.address}, which every "
                          "host's resolv.conf names", f"add {dns.address} (or an interface)",
                          hosts=(dns.name,))


# ports deploykit's Consul agents bind without a setting (Consul's defaults): serf LAN on
# every agent, server RPC and serf WAN on servers
CONSUL_AGENT_PORTS = ((8301, "Consul's serf LAN port (fixed)"),)
CONSUL_SERVER_PORTS = ((8300, "Consul's server RPC port (fixed)"),
                       (8302, "Consul's serf WAN port (fixed)"))


def ports_in_use(host: Host, monitored: bool = False) -> dict[int, str]:
    """Every TCP port deploykit's services claim on this host, with the key that sets it
    (fixed ports first, so that a clash names the setting); `monitored`: the site has a
    monitoring group (serving hosts then run the node exporter)."""
    c = host.config
    claims: list[tuple[int, str]] = []
    if c.deploykit_dns_mode == "consul" and host.groups & {"rgw", "consul_servers"}:
        claims += list(CONSUL_AGENT_PORTS)
        if "consul_servers" in host.groups:
            claims += list(CONSUL_SERVER_PORTS)
    if "rgw" in host.groups:
        claims += [(c.ceph_rgw_frontend_port + i, "ceph_rgw_frontend_port")
                   for i in range(c.ceph_rgw_count_per_host)]
        claims += [(c.deploykit_s3_port, "deploykit_s3_port"),
                   (c.ceph_rgw_concentrator_monitor_port, "ceph_rgw_concentrator_monitor_port"),
                   (c.ceph_rgw_concentrator_stats_port, "ceph_rgw_concentrator_stats_port")]
    if "dns" in host.groups:
        claims += [(c.coredns_port, "coredns_port"), (c.coredns_health_port, "coredns_health_port"),
                   (c.coredns_ready_port, "coredns_ready_port"),
                   (c.coredns_metrics_port, "coredns_metrics_port")]
    if c.deploykit_dns_mode == "consul" and host.groups & {"rgw", "consul_servers"}:
        claims += [(c.consul_dns_port, "consul_dns_port"), (c.consul_http_port, "consul_http_port")]
    if "vllm" in host.groups:
        # every instance listens on vllm_port + i (config/instances.py)
        claims += [(c.vllm_port + i, "vllm_port") for i in range(instance_count(c))]
        if c.lmcache_server:
            claims += [(c.lmcache_server_port, "lmcache_server_port"),
                       (c.lmcache_server_http_port, "lmcache_server_http_port"),
                       (c.lmcache_server_metrics_port, "lmcache_server_metrics_port")]
        if monitored and c.monitoring_node_exporter_install:
            claims.append((c.monitoring_node_exporter_port, "monitoring_node_exporter_port"))
    if "monitoring" in host.groups:
        claims += [(c.monitoring_prometheus_port, "monitoring_prometheus_port"),
                   (c.monitoring_blackbox_port, "monitoring_blackbox_port")]
        if c.monitoring_alertmanager:
            claims.append((c.monitoring_alertmanager_port, "monitoring_alertmanager_port"))
    seen: dict[int, str] = {}
    for port, key in claims:
        seen[port] = f"{seen[port]}|{key}" if port in seen and seen[port] != key else key
    return seen


@rule
def host_ports_distinct(site: Site) -> Iterator[Problem]:
    """Services on one host cannot share a port (e.g. CoreDNS health vs a gateway)."""
    monitored = bool(site.group("monitoring"))
    for host in site.hosts.values():
        for port, keys in sorted(ports_in_use(host, monitored).items()):
            if port > 65535:  # a base port plus an instance index: each setting alone is valid
                key = keys.split("|")[0]
                yield Problem(_src(site, host, key), key,
                              f"its instances reach port {port}, past 65535",
                              "lower it so that every instance's port fits",
                              hosts=(host.name,))
                break
            if "|" not in keys:
                continue
            first, key = keys.split("|")[:2]
            if key not in host.sources and first in host.sources:
                first, key = key, first  # name the setting the inventory sets
            yield Problem(_src(site, host, key), key, f"port {port} is also used by {first}",
                          "give each service on the host its own port", hosts=(host.name,))


@rule
def packages_mode_knows_cluster(site: Site) -> Iterator[Problem]:
    """Packages-mode gateways write their own ceph.conf: they need the fsid and mon host."""
    for host in site.group("rgw")[:1]:
        c = host.config
        if c.ceph_rgw_mode != "packages":
            continue
        for key in ("deploykit_ceph_fsid", "deploykit_ceph_mon_host"):
            if not getattr(c, key):
                yield Problem(_src(site, host, key), key,
                              "required with ceph_rgw_mode: packages",
                              "copy it from `ceph config generate-minimal-conf`")


@rule
def rope_override_complete(site: Site) -> Iterator[Problem]:
    """Under transformers 5 a rope override replaces all rope parameters: rope_theta is needed."""
    for host in site.group("vllm"):
        c = host.config
        try:
            table = compat.vllm(c.vllm_version)
        except ValueError:
            continue
        if not c.vllm_rope_scaling or table.rope_override != "rope_parameters":
            continue
        known = "rope_theta" in c.vllm_rope_scaling or (
            host.geometry is not None and host.geometry.rope_theta)
        if not known:
            yield Problem(_src(site, host, "vllm_rope_scaling"), "vllm_rope_scaling.rope_theta",
                          f"the rope_theta of {c.vllm_model} is unknown on {host.name}; vLLM "
                          f"{c.vllm_version} would drop it with this override",
                          "add rope_theta (from the model's config.json) to vllm_rope_scaling, "
                          "or set vllm_model_config")


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


def torch_pairing(site: Site) -> Iterator[Problem]:
    """LMCache's C extensions link the torch they were built against; vLLM pins its own.
    A plan warning, not a rule: the break is inferred (LMCache #585, #1294, #1712 broke on
    particular symbols, not on every minor), no GPU has run the pair here, and a refusal
    would refuse deploykit's default CUDA stack on that inference. A site's own wheel
    (lmcache_wheel_dir) is built against the site's torch, so only PyPI's wheel is named."""
    for host, accelerator, table in _pinned_vllm_hosts(site):
        c = host.config
        try:
            built = compat.lmcache(c.lmcache_version).build_torch
        except ValueError:
            continue
        if not c.lmcache_install or c.lmcache_wheel_dir or accelerator == "cpu" or \
                built is None or table.torch is None or built == table.torch:
            continue
        yield Problem(_src(site, host, "lmcache_version"), "lmcache_version",
                      f"PyPI's LMCache {c.lmcache_version} C extensions are built against "
                      f"torch {built}, vLLM {c.vllm_version} pins torch {table.torch} "
                      f"({host.name}): `import lmcache.c_ops` may fail with undefined symbols",
                      f"pin a vLLM on torch {built}, or build LMCache against torch "
                      f"{table.torch} into lmcache_wheel_dir", hosts=(host.name,))


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


@rule
def concentrator_choice_valid(site: Site) -> Iterator[Problem]:
    """The cephadm concentrator is a cephadm spec field: packages mode has only deploykit's."""
    for host in site.group("rgw")[:1]:
        c = host.config
        if c.ceph_rgw_concentrator == "cephadm" and c.ceph_rgw_mode != "cephadm":
            yield Problem(_src(site, host, "ceph_rgw_concentrator"), "ceph_rgw_concentrator",
                          "cephadm with ceph_rgw_mode: packages",
                          "use ceph_rgw_concentrator: deploykit")


_UUID = r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"


@rule
def consul_secrets_well_formed(site: Site) -> Iterator[Problem]:
    """Consul ACL tokens are UUIDs and the gossip key is 32 bytes of base64 (when given:
    a locked vault leaves them unknown until Ansible runs, and the role asserts them), and
    each is set for every Consul host or for none (then `up` generates it)."""
    import base64
    import binascii
    import re

    from deploy_kit.config.site_secrets import CONSUL_TOKENS, is_set, needs

    # a secret set nowhere is generated by `up` (config/site_secrets.py); one set for some
    # Consul agents and not others would give the cluster two values
    for key in (*CONSUL_TOKENS, "consul_gossip_key"):
        agents = [h for h in site.hosts.values() if needs(h, key)]
        given = [h for h in agents if is_set(h, key)]
        if given and len(given) < len(agents):
            lacking = sorted({h.name for h in agents} - {h.name for h in given})
            yield Problem(_src(site, given[0], key), key,
                          f"is set for {given[0].name} but not for {', '.join(lacking[:3])}"
                          + (f" and {len(lacking) - 3} more" if len(lacking) > 3 else ""),
                          "set it once for every Consul host (group_vars/all, in the vault), "
                          "or nowhere to let deploykit generate it", hosts=tuple(lacking))
    for host in (site.group("consul_servers") + site.group("rgw"))[:1]:
        c = host.config
        if c.deploykit_dns_mode != "consul":
            return
        if c.consul_acl_enabled:
            for key in ("consul_acl_management_token", "consul_acl_agent_token",
                        "consul_acl_service_token", "consul_acl_dns_token"):
                token = getattr(c, key)
                if token is not None and not re.match(_UUID, token.get_secret_value()):
                    yield Problem(_src(site, host, key), key, "not a UUID",
                                  "generate one with `uuidgen` and keep it in the vault")
        if c.consul_gossip_encryption and c.consul_gossip_key is not None:
            try:
                ok = len(base64.b64decode(c.consul_gossip_key.get_secret_value(),
                                          validate=True)) == 32
            except (binascii.Error, ValueError):
                ok = False
            if not ok:
                yield Problem(_src(site, host, "consul_gossip_key"), "consul_gossip_key",
                              "not 32 bytes of base64", "generate one with `consul keygen`")


_CONSUL_TLS_WHY = {"consul_tls_enabled": "a TLS agent and a plain one cannot talk RPC",
                   "consul_datacenter": "the server certificates name one datacenter"}


@rule
def consul_tls_agrees(site: Site) -> Iterator[Problem]:
    """consul_tls_enabled is one value for every Consul agent (a TLS server refuses a plain
    agent's RPC), and with it one datacenter (the server certificates name it)."""
    agents = [h for h in site.hosts.values()
              if h.config.deploykit_dns_mode == "consul" and h.groups & {"rgw", "consul_servers"}]
    keys = ("consul_tls_enabled", "consul_datacenter") \
        if any(h.config.consul_tls_enabled for h in agents) else ("consul_tls_enabled",)
    for key in keys:
        values = [getattr(h.config, key) for h in agents]
        common = max(values, key=values.count) if values else None
        for host in (h for h, v in zip(agents, values, strict=True) if v != common):
            yield Problem(_src(site, host, key), key,
                          f"{host.name} has {getattr(host.config, key)!r}, the other Consul "
                          f"agents {common!r}", "use one value on every Consul agent (rgw "
                          "and consul_servers): " + _CONSUL_TLS_WHY[key], hosts=(host.name,))


# --- values that are accepted but cannot work, and secrets outside 0600 files -------------

# `tokens` (plural) is a count in LMCache's and vLLM's names (min_retrieve_tokens), not a key
_SECRET_NAME = re.compile(r"(secret|token(?!s)|passw|credential|access_key|api_key|private_key|"
                          r"session_key|auth)", re.IGNORECASE)


def _secret_paths(data: Any, prefix: str) -> Iterator[str]:
    if isinstance(data, dict):
        for key, value in data.items():
            path = f"{prefix}.{key}"
            if _SECRET_NAME.search(str(key)) and value not in (None, "", False):
                yield path
            else:
                yield from _secret_paths(value, path)
    elif isinstance(data, list):
        for i, value in enumerate(data):
            yield from _secret_paths(value, f"{prefix}[{i}]")


@rule
def no_secrets_in_plain_files(site: Site) -> Iterator[Problem]:
    """Credentials reach a host only through the 0600 profile (vault or RGW): never through
    vllm.env / lmcache.yaml (0644), extra args, or a copy of the S3 key in another setting."""
    for host in site.hosts.values():
        c = host.config
        for key, where in (("vllm_extra_env", "vllm.env (0644)"),
                           ("lmcache_extra_config", "lmcache.yaml (0644)"),
                           ("lmcache_top_level_config", "lmcache.yaml (0644)")):
            for path in _secret_paths(getattr(c, key), key):
                yield Problem(_src(site, host, key), path,
                              f"a credential here would be written to {where}",
                              "remove it: deploykit writes the S3 keys to the 0600 credentials "
                              "profile from the vault or RGW", hosts=(host.name,))
        # every secret (S3 keys, Consul tokens and gossip key, vLLM API key, HAProxy stats
        # password) against every plain setting: a pasted copy lands in 0644 units, env
        # files, run records and `ps` on the hosts
        secrets = {key: value.get_secret_value() for key in SECRET_KEYS
                   if (value := getattr(c, key, None)) is not None}
        secrets = {key: value for key, value in secrets.items() if len(value) >= 8}
        if not secrets:
            continue
        for key in sorted(set(type(c).model_fields) - set(SECRET_KEYS)):
            text = repr(getattr(c, key))
            copied = sorted(name for name, value in secrets.items() if value in text)
            if copied:
                yield Problem(_src(site, host, key), key,
                              f"holds the value of {', '.join(copied)} (it would be written "
                              "in plain text where that secret never goes)",
                              "remove it: deploykit writes each secret only to its 0600 file",
                              hosts=(host.name,))


# addresses_distinct: one machine under two names is rules_inventory.one_name_per_machine


@rule
def tensor_parallel_fits_kv_heads(site: Site) -> Iterator[Problem]:
    """vLLM needs KV heads divisible by TP (or TP by KV heads); the sizing assumes it."""
    for host in site.group("vllm"):
        g, tp = host.geometry, host.config.vllm_tensor_parallel_size
        if g is None or g.mla or tp == 1:
            continue
        if g.num_kv_heads % tp and tp % g.num_kv_heads:
            ok = [n for n in range(1, 65) if g.num_kv_heads % n == 0 or n % g.num_kv_heads == 0]
            yield Problem(_src(site, host, "vllm_tensor_parallel_size"),
                          "vllm_tensor_parallel_size",
                          f"TP {tp} does not divide the model's {g.num_kv_heads} KV heads "
                          "(vLLM refuses to start)",
                          f"use one of {', '.join(map(str, ok[:8]))}", hosts=(host.name,))


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


@rule
def tls_consistent(site: Site) -> Iterator[Problem]:
    """lmcache_extra_config.disable_tls must agree with deploykit_s3_tls."""
    for host in site.group("vllm"):
        c = host.config
        if "disable_tls" not in c.lmcache_extra_config:
            continue
        disable = c.lmcache_extra_config["disable_tls"]
        if (disable is True and c.deploykit_s3_tls) or \
                (disable is False and not c.deploykit_s3_tls):
            yield Problem(_src(site, host, "lmcache_extra_config"),
                          "lmcache_extra_config.disable_tls",
                          f"{disable} contradicts deploykit_s3_tls {c.deploykit_s3_tls} "
                          "(every S3 request would fail)",
                          "remove it: deploykit sets disable_tls from deploykit_s3_tls",
                          hosts=(host.name,))
        elif not isinstance(disable, bool):
            yield Problem(_src(site, host, "lmcache_extra_config"),
                          "lmcache_extra_config.disable_tls", f"{disable!r} is not true/false",
                          "remove it: deploykit sets it from deploykit_s3_tls",
                          hosts=(host.name,))


def _tls_dir_problem(site: Site) -> str | None:
    """Why deploykit_tls_dir cannot be the CA's private directory, or None: `up` chmods it
    0700 and writes a `.gitignore` of `*` there, so it must be nothing else's."""
    value = Path(str(site.settings.deploykit_tls_dir)).expanduser()
    given = value if value.is_absolute() else site.root / value  # as render.tls resolves it
    if given.is_symlink():
        return f"{given} is a symlink"
    # `/`, system directories and those above them, the home directory, the inventory
    why = rules_paths.controller_dir_problem(site, given, trees=("/proc", "/sys", "/dev", "/boot"))
    if why:
        return why
    target = given.resolve()
    if target.exists() and not target.is_dir():
        return f"{target} is not a directory"
    if target.is_dir():
        from deploy_kit.safe_read import UnreadableFile, read_text

        try:
            ours = read_text(target / ".gitignore", 4096).startswith("# deploykit's CA")
        except (OSError, UnreadableFile):
            ours = False
        if not ours and any(target.iterdir()):
            return f"{target} already holds other files"
    return None


@rule
def tls_settings_valid(site: Site) -> Iterator[Problem]:
    """A taken CA needs its certificate and its key; one CA, directory and lifetime site-wide
    (every concentrator certificate is issued from the same CA on the controller)."""
    keys = ("deploykit_tls_ca_cert", "deploykit_tls_ca_key", "deploykit_tls_dir",
            "deploykit_tls_cert_days")
    yield from _agree(site, list(site.hosts.values()), keys, "every host")
    s = site.settings
    if s.deploykit_tls_dir and (why := _tls_dir_problem(site)):
        yield Problem(site.settings_source("deploykit_tls_dir"), "deploykit_tls_dir", why,
                      "name a directory of its own (up makes it 0700 and git-ignores all of "
                      "it), e.g. .deploykit-tls beside the inventory")
    if not s.deploykit_s3_tls:
        return
    if (s.deploykit_tls_ca_cert is None) != (s.deploykit_tls_ca_key is None):
        missing = "deploykit_tls_ca_key" if s.deploykit_tls_ca_key is None \
            else "deploykit_tls_ca_cert"
        yield Problem(site.settings_source(missing), missing,
                      "an existing CA needs both its certificate and its key",
                      "set deploykit_tls_ca_cert and deploykit_tls_ca_key, or neither "
                      "(deploykit then creates a CA)")
    for key in keys[:3]:
        value = getattr(s, key)
        if value is not None and (not value or "\n" in value or "\x00" in value):
            yield Problem(site.settings_source(key), key, f"{value!r} is not a path",
                          "give a path on the controller (relative: to the inventory)")


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


# --- devices: models, memory, instances ----------------------------------------------------


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


def _gib(n: float) -> str:
    return f"{n / fit.GIB:.1f} GiB"


@rule
def memory_fits(site: Site) -> Iterator[Problem]:
    """Weights/(TP x PP) + one max-length request's KV + headroom must fit utilisation x
    device memory on every device, or vLLM refuses to start (its KV check at start-up)."""
    for host in site.group("vllm"):
        c = host.config
        if host.geometry is None or c.vllm_accelerator in (None, "cpu"):
            continue
        try:
            result = fit.device_fit(c, host.geometry)
        except ValueError:  # TP does not fit the heads: tensor_parallel_fits_kv_heads
            continue
        if isinstance(result, str) or result.fits:
            continue
        graphs = f" + {result.graph_reserved:.0%} for HPU graphs" if result.graph_reserved \
            else ""
        key = "vllm_gpu_memory_utilization"
        yield Problem(
            _src(site, host, key), key,
            f"{c.vllm_model} TP {c.vllm_tensor_parallel_size} on {result.device}: weights "
            f"{_gib(result.weights_bytes)} + one {result.max_model_len}-token request's KV "
            f"{_gib(result.request_bytes)} + headroom {_gib(result.headroom_bytes)}{graphs} "
            f"per device > {result.utilisation:g} x {_gib(result.hbm_bytes)} = "
            f"{_gib(result.budget_bytes)} (vLLM refuses to start)",
            ", or ".join(fit.fixes(c, host.geometry, result)), hosts=(host.name,))


# vLLM's data-parallel flags (vllm/engine/arg_utils.py: --data-parallel-size / -dp and the
# --data-parallel-* family): one engine spanning the host's devices, the job instances do
_DATA_PARALLEL = re.compile(r"^(-dp|--data[-_]parallel[-_][a-z_-]+)(=.*)?$|^-dp\d+$")


@rule
def instances_fit_devices(site: Site) -> Iterator[Problem]:
    """Instances x TP x PP within the host's devices; several instances need a device count
    (else they would share devices); data parallelism and device variables are deploykit's
    (instances and their device sets), not extra args."""
    for host in site.group("vllm"):
        c = host.config
        count = instance_count(c)
        if c.vllm_accelerator_count is not None and count * workers(c) > c.vllm_accelerator_count:
            yield Problem(_src(site, host, "vllm_instances"), "vllm_instances",
                          f"{count} instances x TP {c.vllm_tensor_parallel_size} x PP "
                          f"{c.vllm_pipeline_parallel_size} need {count * workers(c)} devices, "
                          f"{host.name} has vllm_accelerator_count {c.vllm_accelerator_count}",
                          f"use at most {max(1, c.vllm_accelerator_count // workers(c))} "
                          "instances", hosts=(host.name,))
        gpu = c.vllm_accelerator in DEVICE_ENV
        if gpu and count > 1 and c.vllm_accelerator_count is None:
            yield Problem(_src(site, host, "vllm_instances"), "vllm_instances",
                          f"{count} instances on {host.name} without vllm_accelerator_count: "
                          "every instance would see every device",
                          "set vllm_accelerator_count (devices per host)", hosts=(host.name,))
        for word in c.vllm_extra_args:
            if _DATA_PARALLEL.match(word):
                yield Problem(_src(site, host, "vllm_extra_args"), "vllm_extra_args",
                              f"{word.split('=')[0]} runs data parallelism inside one vLLM, "
                              "which deploykit's units, ports and plan do not see",
                              "remove it: use vllm_accelerator_count / vllm_instances "
                              "(one instance per TP x PP devices)", hosts=(host.name,))
                break
        renders_devices = any(i.devices for i in instances(host.name, c))
        for name in sorted(set(c.vllm_extra_env) & set(DEVICE_ENV.values())):
            if renders_devices:
                yield Problem(_src(site, host, "vllm_extra_env"), f"vllm_extra_env.{name}",
                              "deploykit gives each instance its own device set in this "
                              "variable; this value would override it",
                              "remove it: set vllm_accelerator_count / vllm_instances",
                              hosts=(host.name,))


@rule
def server_l1_holds_request(site: Site) -> Iterator[Problem]:
    """The LMCache server stages every hit in its L1: less than one max-length request
    (all ranks of one instance) cannot pass a full-length prefix through."""
    for host in site.group("vllm"):
        c = host.config
        if not c.lmcache_server or host.geometry is None:
            continue
        length = fit.max_model_len(c, host.geometry)
        if length is None:
            continue
        try:
            need = fit.request_kv_bytes(c, host.geometry, length[0])
        except ValueError:
            continue
        explicit = "lmcache_server_l1_size_gb" in host.sources
        l1 = c.lmcache_server_l1_size_gb
        if explicit and l1 is not None and l1 * fit.GIB < need:
            yield Problem(_src(site, host, "lmcache_server_l1_size_gb"),
                          "lmcache_server_l1_size_gb",
                          f"{l1:g} GiB < one {length[0]}-token request's KV {_gib(need)} "
                          f"(every rank of one instance) on {host.name}",
                          f"use at least {-(-need // fit.GIB)} (x {instance_count(c)} "
                          "instances for one request each), or unset it (plan computes it)",
                          hosts=(host.name,))
        elif c.vllm_host_memory_gb is not None and need > c.vllm_host_memory_gb * fit.GIB / 2:
            yield Problem(_src(site, host, "vllm_host_memory_gb"), "vllm_host_memory_gb",
                          f"half of {c.vllm_host_memory_gb:g} GiB cannot hold one "
                          f"{length[0]}-token request's KV {_gib(need)} in the server's L1",
                          "lower vllm_max_model_len, or use hosts with more memory",
                          hosts=(host.name,))



# rule families kept in modules of their own (they import nothing from this one)
RULES += [*rules_paths.RULES, *rules_network.RULES, *rules_downloads.RULES,
          *rules_monitoring.RULES, *rules_cache.RULES]
