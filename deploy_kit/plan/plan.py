"""Build the deployment plan: per-model geometry, per-host needs, pools, DNS and rollout."""

from __future__ import annotations

import ipaddress
from collections.abc import Collection
from dataclasses import asdict, dataclass, field
from typing import Any

from deploy_kit.config import fit
from deploy_kit.config.instances import instance_count
from deploy_kit.config.models import HostConfig
from deploy_kit.config.names import remote_url
from deploy_kit.config.rules_accelerators import accelerator_wheels_available, torch_pairing
from deploy_kit.config.s3_identities import bucket_names
from deploy_kit.config.site import Host, Site
from deploy_kit.core import compat
from deploy_kit.core.geometry import (
    AESGCM_FRAME_BYTES,
    LMCACHE_DTYPE_NAMES,
    chunk_layout,
    kv_dtype_bytes,
)
from deploy_kit.plan import roll, sizing, tenancy
from deploy_kit.plan.breakeven import (
    ServingGroupPlan,
    device_of,
    group_plan,
    min_retrieve_tokens,
    unmeasured_inputs,
    unrendered_advice,
)
from deploy_kit.plan.routing import RoutingEstimate, estimate
from deploy_kit.plan.serving import accelerator_of, serving_host

PLAN_SCHEMA = 1


@dataclass
class ModelPlan:
    model: str
    tensor_parallel: int
    pipeline_parallel: int
    kv_dtype: str
    chunk_tokens: int
    bytes_per_token: int
    object_bytes: int
    objects_per_chunk: int
    # HTTP requests through the concentrators per chunk (awscrt multipart above 8 MiB)
    s3_put_requests_per_chunk: int
    s3_get_requests_per_chunk: int
    chunk_bytes: int
    target_tokens: int
    storage_bytes: int
    storage_raw_bytes: int
    object_name_pattern: str
    hosts: list[str]
    # lmcache_l2_encryption: the AES-GCM frame in every object above (0: plaintext)
    l2_frame_bytes: int = 0
    # the bucket these hosts share (their sharing group): a model served in two buckets is
    # stored, and sized, in each
    bucket: str = ""


@dataclass
class HostPlan:
    host: str
    accelerator: str
    block_size: int
    workers: int  # devices of one instance (TP x PP)
    # in-process LMCache's pinned pool (max_local_cpu_size per worker); 0 on server hosts,
    # whose `lmcache server` does not read that knob (its DRAM is the L1 below)
    pinned_dram_bytes: int
    shm_bytes: int
    instances: int = 1
    device: str = ""  # accelerator model (compat.yaml accelerator_models)
    # per device of one instance (config/fit.py); None: not judged (see fit_note)
    weights_bytes: int | None = None
    kv_capacity_tokens: int | None = None
    max_model_len: int | None = None
    requests_fit: int | None = None  # max-length requests the KV cache holds at once
    fit_note: str = ""
    lmcache_server_l1_bytes: int | None = None  # server topology: the L1 rendered


@dataclass
class PoolPlan:
    name: str
    pg_num: int
    size: int
    min_size: int
    application: str


@dataclass
class RolloutStep:
    phase: str
    hosts: list[str]
    serial: int | None = None


@dataclass
class Plan:
    schema: int
    site: dict[str, Any]
    models: list[ModelPlan]
    hosts: list[HostPlan]
    pools: list[PoolPlan]
    pg_replicas: int
    pgs_per_osd: float | None
    dns: dict[str, Any]
    rollout: list[RolloutStep]
    # per serving group and context length: KV bytes, predicted cold prefill, break-even
    # GET bandwidth per host (plan.breakeven)
    serving_groups: list[ServingGroupPlan] = field(default_factory=list)
    # per lease (model): the daily scheduled restart's roll against its window (plan.roll)
    restarts: list[roll.RollPlan] = field(default_factory=list)
    # where the site has routers, per serving group: where a repeated prefix is answered
    # with and without them (plan.routing: an estimate, its assumptions with it)
    routing: list[RoutingEstimate] = field(default_factory=list)
    # each bucket's serving hosts (one key format per bucket) and each team's identity,
    # bucket, salt and quota (plan.tenancy, docs/teams.md)
    sharing_groups: list[tenancy.SharingGroupPlan] = field(default_factory=list)
    teams: list[tenancy.TeamPlan] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _data_pool_size(site: Site) -> int:
    admin = site.group("ceph_admin")
    pools = admin[0].config.ceph_rgw_pools_list if admin else site.settings.ceph_rgw_pools_list
    data = [p for p in pools if p.name.endswith(".data")]
    return data[0].size if data else 1


def _model_plans(site: Site) -> list[ModelPlan]:
    groups: dict[tuple[Any, ...], list[Host]] = {}
    for host in site.group("vllm"):
        c = host.config
        key = (c.vllm_model, c.vllm_tensor_parallel_size, c.vllm_pipeline_parallel_size,
               c.vllm_kv_cache_dtype, c.lmcache_chunk_size, c.lmcache_l2_encryption,
               c.cache_bucket)
        groups.setdefault(key, []).append(host)
    replicas = _data_pool_size(site)
    plans = []
    for (model, tp, pp, kv_dtype, chunk, encrypted, bucket), hosts in sorted(groups.items()):
        geometry = hosts[0].geometry
        if geometry is None:
            continue
        dtype_bytes = kv_dtype_bytes(geometry, kv_dtype)
        frame = AESGCM_FRAME_BYTES if encrypted else 0
        layout = chunk_layout(geometry, chunk_tokens=chunk, tensor_parallel=tp,
                              pipeline_parallel=pp, dtype_bytes=dtype_bytes, frame_bytes=frame)
        target = hosts[0].config.deploykit_cache_target_tokens
        storage = sizing.capacity_bytes(target, layout.chunk_bytes, chunk)
        dtype_name = LMCACHE_DTYPE_NAMES.get(
            geometry.dtype if kv_dtype == "auto" else kv_dtype, kv_dtype)
        world = 1 if geometry.mla else tp * pp
        requests = sizing.s3_requests(layout.object_bytes)
        plans.append(ModelPlan(
            model=model, tensor_parallel=tp, pipeline_parallel=pp, kv_dtype=dtype_name,
            chunk_tokens=chunk, bytes_per_token=layout.bytes_per_token,
            object_bytes=layout.object_bytes, objects_per_chunk=layout.objects_per_chunk,
            s3_put_requests_per_chunk=requests.put * layout.objects_per_chunk,
            s3_get_requests_per_chunk=requests.get * layout.objects_per_chunk,
            chunk_bytes=layout.chunk_bytes, target_tokens=target, storage_bytes=storage,
            storage_raw_bytes=storage * replicas,
            object_name_pattern=f"{model.replace('/', '_')}@{world}@<rank>@<hash>@{dtype_name}",
            hosts=sorted(h.name for h in hosts), l2_frame_bytes=frame, bucket=bucket))
    return plans


def cache_bytes(site: Site, hosts: Collection[str] | None = None,
                bucket: str | None = None) -> int:
    """The bucket bytes every model's deploykit_cache_target_tokens needs (0: none known);
    with `hosts`, only the models those hosts serve; with `bucket`, only those served in
    that bucket (a model plan is one bucket's: a model in two buckets is stored in each)."""
    return sum(m.storage_bytes for m in _model_plans(site)
               if (hosts is None or not set(m.hosts).isdisjoint(hosts))
               and (bucket is None or m.bucket == bucket))


def serving_groups(site: Site) -> list[ServingGroupPlan]:
    """Hosts that predict alike: same model, parallelism, KV dtype, device, measured
    TFLOPS and storage bandwidth."""
    groups: dict[tuple[Any, ...], list[Host]] = {}
    for host in site.group("vllm"):
        c = host.config
        key = (c.vllm_model, c.vllm_tensor_parallel_size, c.vllm_kv_cache_dtype,
               accelerator_of(c), device_of(c), c.vllm_prefill_tflops,
               c.deploykit_storage_gbps)
        groups.setdefault(key, []).append(host)
    plans = []
    for _, hosts in sorted(groups.items(), key=lambda kv: str(kv[0])):
        if hosts[0].geometry is None:
            continue
        group = group_plan(hosts[0].config.vllm_model, hosts[0].geometry, hosts[0].config,
                           [h.name for h in hosts])
        for host in hosts:  # what each host's lmcache.yaml says (in-process only)
            tokens = min_retrieve_tokens(host.config, host.geometry)
            if tokens is not None:
                group.min_retrieve_tokens[host.name] = tokens
            advice = unrendered_advice(host.config, host.geometry)
            if advice is not None:
                group.retrieve_advice[host.name] = advice
                group.unmeasured = unmeasured_inputs(host.config)
        plans.append(group)
    return plans


def _host_plans(site: Site) -> list[HostPlan]:
    out = []
    for host in site.group("vllm"):
        c = host.config
        object_bytes = 0
        if host.geometry is not None:
            object_bytes = chunk_layout(
                host.geometry, chunk_tokens=c.lmcache_chunk_size,
                tensor_parallel=c.vllm_tensor_parallel_size,
                pipeline_parallel=c.vllm_pipeline_parallel_size,
                dtype_bytes=kv_dtype_bytes(host.geometry, c.vllm_kv_cache_dtype)).object_bytes
        server = c.lmcache_server
        plan = HostPlan(
            host=host.name, accelerator=c.vllm_accelerator or "?", block_size=host.block_size,
            workers=host.workers,
            # every worker of every instance pins its own pool
            pinned_dram_bytes=0 if server else sizing.pinned_dram_bytes(
                c, host.workers * instance_count(c)),
            shm_bytes=sizing.shm_bytes(c, host.workers, object_bytes),
            instances=instance_count(c), device=device_of(c),
            lmcache_server_l1_bytes=int(fit.l1_gb(c) * fit.GIB) if server else None)
        out.append(_with_fit(plan, host))
    return sorted(out, key=lambda h: h.host)


def _with_fit(plan: HostPlan, host: Host) -> HostPlan:
    """The device columns: weights, KV capacity and max-length requests per device."""
    c = host.config
    if host.geometry is None or serving_host(host).is_cpu:
        return plan
    try:
        result = fit.device_fit(c, host.geometry)
    except ValueError:  # TP does not fit the heads: validate reports it
        return plan
    if isinstance(result, str):
        plan.fit_note = result
        return plan
    plan.weights_bytes = result.weights_bytes
    plan.kv_capacity_tokens = result.kv_capacity_tokens
    plan.max_model_len = result.max_model_len
    plan.requests_fit = result.requests_fit
    return plan


def rollout(site: Site) -> list[RolloutStep]:
    """Dependency order: pools before any RGW, DNS before clients, serving hosts last."""
    names = {g: sorted(h.name for h in site.group(g)) for g in
             ("ceph_admin", "rgw", "consul_servers", "dns", "vllm", "router")}
    consul_agents = sorted(set(names["consul_servers"]) | set(names["rgw"]) |
                           set(names["router"]))
    steps = [RolloutStep("ceph_rgw_pools", names["ceph_admin"][:1]),
             RolloutStep("ceph_rgw", names["rgw"]),
             RolloutStep("ceph_rgw_s3", names["ceph_admin"][:1])]
    if site.settings.deploykit_dns_mode == "consul":
        steps.append(RolloutStep("consul", consul_agents))
    steps += [RolloutStep("coredns", names["dns"]),
              RolloutStep("resolver", names["vllm"]),
              RolloutStep("lmcache", names["vllm"]),
              RolloutStep("vllm", names["vllm"], serial=vllm_serial(site)),
              # one router at a time, so the routers' name never loses every answer
              RolloutStep("router", names["router"], serial=1)]
    return [s for s in steps if s.hosts]


def _loopback(address: str) -> bool:
    return ipaddress.ip_address(address).is_loopback


def _warnings(site: Site, pgs_per_osd: float | None) -> list[str]:
    out = []
    ceph = compat.ceph(site.settings.deploykit_ceph_version)
    if site.settings.ceph_rgw_mode == "cephadm" and \
            site.settings.ceph_rgw_concentrator == "cephadm" and not ceph.has_concentrator:
        out.append(f"ceph_rgw_concentrator: cephadm on ceph {site.settings.deploykit_ceph_version}"
                   f" ({ceph.release}): no upstream release has the RGW spec `concentrator` "
                   "fields (IBM Storage Ceph 8.1 does); `ceph orch apply` refuses them elsewhere")
    if not ceph.verified:
        out.append(f"ceph {site.settings.deploykit_ceph_version}: rendered by the {ceph.release} "
                   "rules, this dot release itself unverified (compat.yaml `verified`)")
    out += [f"{p.key}: {p.message}" for p in accelerator_wheels_available(site)]
    out += [f"{p.key}: {p.message} ({p.fix})" for p in torch_pairing(site)]
    out += _serving_warnings(site)
    if pgs_per_osd is not None and pgs_per_osd > 250:
        out.append(f"{pgs_per_osd:.0f} PG replicas per OSD exceeds mon_max_pg_per_osd (250): "
                   "lower pg_num or add OSDs")
    if site.settings.deploykit_s3_tls is False:
        out.append("S3 traffic is plain HTTP (deploykit_s3_tls: false): fine on a private "
                   "storage network only")
    out += security_opt_outs(site)
    out += encryption_notes(site)
    out += self_heal_opt_outs(site)
    if len(site.group("rgw")) == 1:
        out.append("one RGW host: every S3 request goes to one concentrator")
    return out + _router_warnings(site)


def _router_warnings(site: Site) -> list[str]:
    routers = site.group("router")
    if not routers:
        return []
    out = []
    if len(routers) == 1:
        out.append(f"one router ({routers[0].name}): the routers' name has no second answer "
                   "while it restarts or fails")
    if not any(h.config.vllm_direct_sources for h in site.group("vllm")):
        out.append("vllm_direct_sources is empty: with routers, an instance answers /v1 only "
                   "from the routers, the monitoring hosts and itself, so `verify`'s and "
                   "`bench`'s direct requests from a controller elsewhere get 403 (add its "
                   "address)")
    if routers[0].config.router_routing_logic == "prefixaware" and len(routers) > 1:
        out.append("router_routing_logic prefixaware: each router keeps its own tree of "
                   "what it sent where, so a prompt repeated through the other router may "
                   "land elsewhere until that router has seen it (kvaware shares vLLM's "
                   "own KV events; docs/routing.md)")
    return out


def security_opt_outs(site: Site) -> list[str]:
    """One warning per secure default the inventory switched off (docs/security.md)."""
    s = site.settings
    out: list[str] = []
    consul = s.deploykit_dns_mode == "consul" and bool(site.group("consul_servers"))
    if consul and not s.consul_acl_enabled:
        out.append("consul_acl_enabled: false (opt-out): any client of a Consul agent may "
                   "register an `s3` instance that DNS hands to every serving host"
                   + ("" if s.deploykit_s3_tls else ", and S3 TLS is off too"))
    if consul and not s.consul_acl_enabled and not _loopback(s.consul_http_address):
        out.append(f"consul_http_address {s.consul_http_address} opens Consul's HTTP API with "
                   "ACLs off: anyone who reaches it can change the catalog")
    if consul and s.consul_acl_enabled and s.consul_acl_default_policy == "allow":
        out.append("consul_acl_default_policy: allow (opt-out): a request without a token may "
                   "do what no policy forbids")
    if consul and not s.consul_gossip_encryption:
        out.append("consul_gossip_encryption: false (opt-out): a machine on the storage "
                   "network can join the Consul gossip and read or forge membership")
    open_api = sorted(h.name for h in site.group("vllm") if not h.config.vllm_uses_api_key)
    if open_api:
        out.append(f"vllm_api_key_required: false (opt-out) on {_names(open_api)}: the OpenAI "
                   "API takes requests without a key, so anyone who reaches it can read "
                   "and plant KV in the shared cache")
    return out


def encryption_notes(site: Site) -> list[str]:
    """What lmcache_l2_encryption covers and what a new master key costs (docs/security.md,
    Encryption at rest), once per bucket that encrypts."""
    buckets: dict[str, list[Host]] = {}
    for host in site.group("vllm"):
        if host.config.lmcache_l2_encryption:
            buckets.setdefault(host.config.cache_bucket, []).append(host)
    days = site.settings.ceph_rgw_s3_lifecycle_days
    return [f"lmcache_l2_encryption on {_names(sorted(h.name for h in hosts))} (bucket "
            f"{bucket}, AES-{hosts[0].config.lmcache_l2_encryption_aes_bits}-GCM): each S3 "
            f"object is {AESGCM_FRAME_BYTES} B longer; L1 DRAM, the accelerators' memory and "
            "the object keys (model name, cache_salt) stay plaintext. A new master key "
            "(`deploykit secrets rotate l2-key`) makes every stored chunk unreadable: the "
            "cache goes cold and the old objects age out "
            + (f"by the lifecycle ({days} days)" if days > 0 else
               "only when deleted (no lifecycle: ceph_rgw_s3_lifecycle_days 0)")
            for bucket, hosts in sorted(buckets.items())]


def self_heal_opt_outs(site: Site) -> list[str]:
    """An opt-out of the LMCache agent (render/self_heal.py) that leaves a known failure
    standing, on serving hosts with an S3 tier."""
    out: dict[str, None] = {}
    days = site.settings.ceph_rgw_s3_lifecycle_days
    for host in site.group("vllm"):
        c = host.config
        if c.lmcache_mode not in ("s3", "nixl"):
            continue
        if not c.lmcache_self_heal:
            out["lmcache_self_heal: false (opt-out): a tripped LMCache S3 breaker stays "
                "tripped until `deploykit up` restarts the process"] = None
        if not c.lmcache_scheduled_restart and days > 0:
            out["lmcache_scheduled_restart: false with lifecycle expiry on "
                f"(ceph_rgw_s3_lifecycle_days: {days}): each running LMCache keeps "
                "announcing expired objects as stored, and recomputes them, until it "
                "restarts (`deploykit up --restart-serving`)"] = None
    return list(out)


def _names(names: list[str], shown: int = 3) -> str:
    return ", ".join(names[:shown]) + (f" and {len(names) - shown} more"
                                       if len(names) > shown else "")


def _serving_warnings(site: Site) -> list[str]:
    """What the memory and L1 sizing could not judge, once per distinct sentence."""
    out: dict[str, None] = {}
    for host in site.group("vllm"):
        c = host.config
        if not c.lmcache_server:
            continue
        if c.lmcache_server_l1_size_gb is None:
            out[f"{host.name}: the LMCache server's L1 was not computed (the context is "
                f"unknown): {fit.FALLBACK_L1_GB:g} GiB rendered; set "
                "lmcache_server_l1_size_gb or vllm_max_model_len"] = None
        elif "lmcache_server_l1_size_gb" not in host.sources and c.vllm_host_memory_gb is None:
            out["lmcache_server_l1_size_gb is computed from the requests, not bounded by the "
                "hosts' memory (set vllm_host_memory_gb to bound it)"] = None
    return list(out)


def _autoscaler(c: HostConfig) -> str:
    """What `up` does to Ceph's PG autoscaler (roles/ceph_rgw_pools/tasks/configure.yml)."""
    if c.ceph_rgw_pools_noautoscale:
        return ("off cluster-wide (ceph_rgw_pools_noautoscale: the noautoscale flag stops it "
                "for every pool; `down` clears it if deploykit set it)")
    return "off on these pools only (autoscale_mode off); the cluster-wide flag is left alone"


def _consul(c: HostConfig) -> str:
    try:
        return compat.consul_licence(c.consul_version)[1]
    except (ValueError, KeyError):
        return f"Consul {c.consul_version}"


def build_plan(site: Site) -> Plan:
    s = site.settings
    admin = site.group("ceph_admin")
    pools = (admin[0].config if admin else s).ceph_rgw_pools_list
    load = sizing.pool_load(pools, s.deploykit_ceph_osd_count)
    rgw = site.group("rgw")
    dns_servers = site.group("dns")
    restarts = roll.rolls(site)
    groups = serving_groups(site)
    routing = [e for g in groups
               if (e := estimate(g, site.group("vllm"), site.group("router"))) is not None]
    return Plan(
        schema=PLAN_SCHEMA,
        site={"name": site.name, "s3_fqdn": s.deploykit_s3_fqdn,
              "bucket": s.deploykit_s3_bucket, "remote_url": remote_url(s),
              "dns_mode": s.deploykit_dns_mode, "ceph_version": s.deploykit_ceph_version,
              "ceph_rgw_mode": s.ceph_rgw_mode,
              "hosts": len(site.hosts),
              "pg_autoscaler": _autoscaler(admin[0].config if admin else s),
              "consul": _consul(s) if s.deploykit_dns_mode == "consul" else None},
        models=_model_plans(site),
        hosts=_host_plans(site),
        pools=[PoolPlan(p.name, p.pg_num, p.size, p.min_size, p.application) for p in pools],
        pg_replicas=load.total_pg_replicas,
        pgs_per_osd=load.pgs_per_osd,
        # CoreDNS answers the name and every <bucket>.<name>: each bucket's virtual host
        dns={"names": [s.deploykit_s3_fqdn, *(f"{b}.{s.deploykit_s3_fqdn}"
                                              for b in bucket_names(site))],
             "expected_a_records": sizing.expected_a_records(len(rgw)),
             "addresses": sorted(h.address for h in rgw),
             "servers": sorted(h.address for h in dns_servers)},
        rollout=rollout(site),
        serving_groups=groups,
        restarts=restarts,
        routing=routing,
        sharing_groups=tenancy.sharing_groups(site),
        teams=tenancy.teams(site, lambda bucket: cache_bytes(site, bucket=bucket)),
        warnings=_warnings(site, load.pgs_per_osd) + roll.warnings(restarts)
        + tenancy.warnings(site),
    )


def vllm_serial(site: Site) -> int:
    """serving.yml batches the vllm group by vllm_serial as the serving hosts see it (it is
    usually set in group_vars/vllm, which the site-wide settings host does not read)."""
    serving = site.group("vllm")
    return serving[0].config.vllm_serial if serving else site.settings.vllm_serial
