"""Run every probe concurrently and assemble one Observation for the checks."""

from __future__ import annotations

import os
import ssl
import time
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from deploy_kit.config import names as site_names
from deploy_kit.config.fit import l1_gb
from deploy_kit.config.instances import endpoints, host_of, instance_count
from deploy_kit.config.models import HostConfig, team_bucket
from deploy_kit.config.s3_identities import identities, layout_prefix
from deploy_kit.config.site import Host, Site
from deploy_kit.core import compat
from deploy_kit.plan.plan import Plan, build_plan
from deploy_kit.plan.serving import serving_host
from deploy_kit.render import tls
from deploy_kit.render.lmcache import object_bytes
from deploy_kit.render.serving_front import instance_tag
from deploy_kit.render.storage import lifecycle_rules
from deploy_kit.transport.hosts import run_many
from deploy_kit.transport.openai import model_name, token_range
from deploy_kit.transport.sigv4 import Credentials
from deploy_kit.verify.model import (
    ConsulView,
    EncryptionProbe,
    IsolationProbe,
    Observation,
    RoutingProbe,
    S3Probe,
    ServingPlan,
    StorageMeasurement,
    TeamIsolationProbe,
)
from deploy_kit.verify.probes import (
    cache_probe,
    ceph_probe,
    consul_probe,
    dns_probe,
    http_probe,
    privilege_probe,
    remote_probe,
    router_probe,
    s3_probe,
    serving_probe,
    side_door_probe,
    team_probe,
    tls_probe,
)

MIB = 1024 * 1024
GIB = 1024 * MIB


def serving_plan(host: Host, plan: Plan | None = None) -> ServingPlan:
    """What one serving host's own settings say it runs, and what that needs in /dev/shm:
    LMCache 0.3's per-request files (sizing.shm_bytes), and on CPU hosts vLLM's KV cache
    (workers x vllm_cpu_kvcache_space GiB) plus the LMCache server's L1."""
    c = host.config
    serving = serving_host(host)
    accelerator = serving.accelerator
    topology = c.lmcache_topology
    needs: dict[str, int] = {}
    files = next((h.shm_bytes for h in plan.hosts if h.host == host.name), 0) if plan else 0
    if files:
        needs[f"LMCache {c.lmcache_version} per-request files "
              f"({host.workers} x {c.lmcache_s3_max_inflight_reqs} x object)"] = files
    if serving.is_cpu:
        kv = float(c.vllm_cpu_kvcache_space)
        engines = instance_count(c) * host.workers
        if kv:
            needs[f"vLLM CPU KV cache ({engines} x VLLM_CPU_KVCACHE_SPACE {kv:g} GiB)"] = \
                int(engines * kv * GIB)
        l1 = l1_gb(c)  # unset outside a site: the render's fallback
        if serving.has_server and l1:
            needs[f"LMCache server L1 {l1:g} GiB"] = int(l1 * GIB)
    return ServingPlan(
        vllm_install=bool(c.vllm_install), lmcache_install=bool(c.lmcache_install),
        accelerator=accelerator, lmcache_topology=topology,
        lmcache_server_port=c.lmcache_server_port, venv=c.vllm_venv,
        accelerator_count=None if serving.is_cpu else c.vllm_accelerator_count,
        pinned={"lmcache": c.lmcache_version, "vllm": c.vllm_version, **nixl_pin(c)},
        shm_needs=needs)


def nixl_pin(c: HostConfig) -> dict[str, str]:
    """nixl hosts: the NIXL release the serving role installs (compat.yaml nixl_packages)."""
    if c.lmcache_mode != "nixl":
        return {}
    try:
        pins = compat.lmcache(c.lmcache_version).nixl_packages
    except ValueError:
        return {}
    found = [p.split("==", 1)[1] for p in pins if p.startswith("nixl==")]
    return {"nixl": found[0]} if found else {}


def planned(site: Site) -> Observation:
    s = site.settings
    admin = site.group("ceph_admin")
    pools = (admin[0].config if admin else s).ceph_rgw_pools_list
    rgw = site.group("rgw")
    vllm = site.group("vllm")
    identity = {}
    if vllm:
        c = vllm[0].config
        identity = {"PYTHONHASHSEED": str(c.vllm_python_hash_seed), "model": c.model_path_on_host,
                    "TP": str(c.vllm_tensor_parallel_size),
                    "PP": str(c.vllm_pipeline_parallel_size),
                    "kv-cache-dtype": c.vllm_kv_cache_dtype,
                    "chunk_size": str(c.lmcache_chunk_size),
                    "chunk hash": c.lmcache_pre_caching_hash_algorithm}
    return Observation(
        fqdn=s.deploykit_s3_fqdn, bucket=s.deploykit_s3_bucket, region=s.deploykit_s3_region,
        rgw_addresses=sorted(h.address for h in rgw),
        dns_servers=sorted(h.address for h in site.group("dns")),
        expected_pools=[p.model_dump() for p in pools],
        expected_rgw_daemons=sum(h.config.ceph_rgw_count_per_host for h in rgw),
        expected_lifecycle=lifecycle_rules(s),
        pinned={"lmcache": s.lmcache_version, "vllm": s.vllm_version,
                **({"tls": "1"} if s.deploykit_s3_tls else {})},
        planned_identity=identity, consul=planned_consul(site),
        router_fqdn=site_names.router_fqdn(s) if site.group("router") else "",
        routers_planned={h.name: h.address for h in site.group("router")},
        instance_tags={instance_tag(e.name): e.name for h in vllm for e in endpoints(h)},
        teams=team_buckets(site),
        teams_serving={h.config.team.name for h in vllm if h.config.team is not None},
        encrypting={h.name: h.config.cache_bucket for h in vllm if encrypts(h)},
        host_buckets={h.name: h.config.cache_bucket for h in vllm})


def planned_consul(site: Site) -> ConsulView | None:
    s = site.settings
    servers = site.group("consul_servers")
    if s.deploykit_dns_mode != "consul" or not servers:
        return None
    rgw = site.group("rgw")
    expected = sorted({h.name for h in servers} | {h.name for h in rgw})
    return ConsulView(server=servers[0].address, service=s.consul_service_name,
                      expected_nodes=expected, rgw_nodes={h.name: h.address for h in rgw})


def object_size(site: Site) -> int:
    plan = build_plan(site)
    return plan.models[0].object_bytes if plan.models else 8 * MIB


# check tag -> the group whose hosts its observations come from (ceph: the first admin)
AREAS = (("ceph", "ceph_admin"), ("consul", "consul_servers"), ("dns", "dns"), ("s3", "rgw"),
         ("tls", "rgw"), ("vllm", "vllm"), ("lmcache", "vllm"), ("router", "router"))


def outside_limit(site: Site, reach: set[str] | None, consul: bool) -> dict[str, str]:
    """check tag -> why its checks observe nothing under --limit: every host they read is
    outside it (pure)."""
    if reach is None:
        return {}
    reasons: dict[str, str] = {}
    for tag, group in AREAS:
        members = site.group(group)[:1] if group == "ceph_admin" else site.group(group)
        if group == "consul_servers" and not consul:
            continue
        if members and not any(h.name in reach for h in members):
            reasons[tag] = (f"needs {group} ({', '.join(h.name for h in members)}), "
                            "outside --limit")
    return reasons


def gather(site: Site, workers: int = 32, s3_object_bytes: int | None = None,
           reach: set[str] | None = None) -> Observation:
    """Probe the site; with `reach` (verify --limit) contact only those hosts, by Ansible or
    directly: what the inventory plans still comes from every host, and the checks whose
    hosts are all outside say so (Observation.outside_limit)."""
    obs = planned(site)
    obs.outside_limit = outside_limit(site, reach, obs.consul is not None)

    def within(hosts: list[Host]) -> list[Host]:
        return [h for h in hosts if reach is None or h.name in reach]

    s = site.settings
    names = [obs.fqdn, f"{obs.bucket}.{obs.fqdn}"]
    rgw_reached = sorted(h.address for h in within(site.group("rgw")))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        dns_jobs = [pool.submit(dns_probe.ask, server, name, transport, s.coredns_port)
                    for server in sorted(h.address for h in within(site.group("dns")))
                    for name in names for transport in ("udp", "tcp")]
        # the routers' name, from the same servers (the routers answer together under it)
        router_dns_jobs = [pool.submit(dns_probe.ask, server, obs.router_fqdn, transport,
                                       s.coredns_port)
                           for server in sorted(h.address for h in within(site.group("dns")))
                           for transport in ("udp", "tcp")] if obs.router_fqdn else []
        routers = within(site.group("router"))
        front_jobs = [pool.submit(router_probe.front, h) for h in routers]
        conc_jobs = [pool.submit(http_probe.concentrator, a, s.deploykit_s3_port,
                                 s.ceph_rgw_concentrator_monitor_port, s.deploykit_s3_tls)
                     for a in rgw_reached]
        # TLS: the handshake LMCache makes (SNI <bucket>.<fqdn>) against the site CA
        tls_jobs = [pool.submit(tls_probe.probe, a, s.deploykit_s3_port,
                                f"{obs.bucket}.{obs.fqdn}", tls.ca_cert_path(site.root, s))
                    for a in rgw_reached] if s.deploykit_s3_tls else []
        # every read on a host, in one Ansible run beside the network probes
        admin = within(site.group("ceph_admin")[:1])
        serving = within(site.group("vllm"))
        # Consul's API listens on loopback: each server reads its own agent's view
        consul_servers = within(site.group("consul_servers")) if obs.consul is not None else []
        if not consul_servers:
            obs.consul = None  # no server to ask: its checks skip, naming why
        # each serving host also resolves its own sharing group's name (its remote_url)
        shell_jobs = [(h, serving_probe.script(h, list(dict.fromkeys(
            [*names, f"{h.config.cache_bucket}.{obs.fqdn}"])))) for h in serving] + \
            [(a, ceph_probe.script(a)) for a in admin] + \
            [(h, consul_probe.script(s.consul_http_port, s.consul_service_name))
             for h in consul_servers]
        shell_job = pool.submit(run_many, site, shell_jobs, ceph_probe.TIMEOUT)
        site_plan = build_plan(site) if serving else None
        obs.serving_groups = site_plan.serving_groups if site_plan else []
        cache_job = pool.submit(cache_probe.probe, serving)
        obs.dns = [j.result() for j in dns_jobs]
        obs.router_dns = [j.result() for j in router_dns_jobs]
        obs.router_fronts = [j.result() for j in front_jobs]
        obs.concentrators = [j.result() for j in conc_jobs]
        obs.tls = [j.result() for j in tls_jobs]
        shell = shell_job.result()
        obs.unreachable = {r.host: r.error for r in shell if r.error is not None}
        obs.serving = [serving_probe.from_result(h, r, serving_plan(h, site_plan))
                       for h, r in zip(serving, shell, strict=False)]
        obs.cache = cache_job.result()
        # after the cache probe too: an open door would run a completion on the instance
        door_jobs = [pool.submit(side_door_probe.probe_endpoint, e)
                     for e in side_door_probe.probe_jobs(serving)]
        # after the cache probe: its per-host counter deltas must not see these requests
        answering = {p.host: p.model for p in obs.cache if p.serving and p.model}
        obs.remote, obs.remote_alone = remote_probe.probe(
            [h for h in serving if all(e.name in answering for e in endpoints(h))],
            {name: str(model) for name, model in answering.items()},
            f"{int(time.time())}-{os.urandom(3).hex()}")
        obs.side_doors = [j.result() for j in door_jobs]
        # last: its completions must not move the cache and cross-host probes' counters
        obs.routing = routing_probes(site, obs, routers, reach)
        if obs.consul is not None:
            obs.consul = consul_probe.from_output(
                obs.consul, [(h.name, r) for h, r in
                             zip(consul_servers, shell[len(shell) - len(consul_servers):],
                                 strict=True)])
        if admin:
            obs.pools, obs.rgw_daemons, obs.ceph_version, obs.ceph_error = \
                ceph_probe.parse(admin[0], shell[len(serving)])
            obs.lifecycle = ceph_probe.lifecycle(shell[len(serving)])
        obs.s3 = _s3(site, obs, pool, s3_object_bytes or object_size(site), rgw_reached)
    return obs


def routing_probes(site: Site, obs: Observation, routers: list[Host], reach: set[str] | None
             ) -> list[RoutingProbe]:
    """Each router within reach, one after another (their prompts' counter deltas stay
    apart): a fresh prompt twice and another once (probes/router_probe.py)."""
    serving = site.group("vllm")
    if not routers or not serving:
        return []
    tags = router_probe.instance_endpoints(serving)
    outside = {t for t, e in tags.items()
               if reach is not None and host_of(e.name) not in reach}
    model = model_name(serving[0])
    ids = token_range(serving[0].config.vllm_accelerator)
    healthy = {f.host for f in obs.router_fronts if f.health == 200}
    run_id = f"{int(time.time())}-{os.urandom(3).hex()}"
    found = []
    for router in routers:
        try:
            found.append(router_probe.routing(router, model, ids, run_id, tags, outside,
                                              router.name in healthy))
        except Exception as exc:  # an unreachable router is a finding, not a crash
            found.append(RoutingProbe(router.name, router.address, obs.router_fqdn,
                                      router.config.router_routing_logic,
                                      error=f"{type(exc).__name__}: {exc}"))
    return found


def _s3(site: Site, obs: Observation, pool: ThreadPoolExecutor, size: int,
        reached: list[str]) -> list[S3Probe]:
    """Each serving host's profile signs one HEAD; the first good one round-trips a chunk
    through every healthy address (of the gateways within --limit)."""
    port, region = site.settings.deploykit_s3_port, obs.region
    # https with the site CA as the only anchor and SNI/name = the Host header, as LMCache
    context = None
    if site.settings.deploykit_s3_tls:
        try:
            context = tls_probe.client_context(tls.ca_cert_path(site.root, site.settings))
        except (OSError, ValueError) as exc:  # s3-tls-certificate reports the missing CA
            obs.probe_errors.append(f"site CA: {exc}")
            return []
    # each host signs for its own sharing group's bucket (its team's, lmcache_s3_bucket or
    # the site's): its keys are granted nothing in any other
    site_header = f"{obs.bucket}.{obs.fqdn}"
    headers = {h.name: f"{h.config.cache_bucket}.{obs.fqdn}" for h in site.group("vllm")}
    healthy = [c.address for c in obs.concentrators if c.health_status == 200] or reached
    if not healthy:
        return []
    jobs = []
    prefixes = {h.name: layout_prefix(h.config) or "" for h in site.group("vllm")}
    for i, host in enumerate(h for h in obs.serving if h.credentials):
        assert host.credentials is not None
        creds = Credentials(host.credentials["access_key"], host.credentials["secret_key"])
        jobs.append((creds, pool.submit(s3_probe.auth, healthy[i % len(healthy)], port,
                                        headers.get(host.name, site_header), region, creds,
                                        host.name, context, prefixes.get(host.name, ""))))
    results = [j.result() for _, j in jobs]
    good = next((c for (c, _), r in zip(jobs, results, strict=True)
                 if r.auth_status == 200), None)
    for host in obs.serving:
        if host.reachable and host.lmcache_yaml is not None and not host.credentials and \
                str(host.lmcache_yaml.get("remote_url", "")).startswith("s3://"):
            results.append(S3Probe(address="-",
                                   host_header=headers.get(host.name, site_header),
                                   credentials_from=host.name,
                                   error="no credentials profile on the host"))
    creds_of = {h.name: Credentials(h.credentials["access_key"], h.credentials["secret_key"])
                for h in obs.serving if h.credentials}
    where = (healthy[0], port, obs.fqdn, region)
    obs.team_isolation = _team_isolation(site, creds_of, where, context)
    obs.encryption = _encryption(site, creds_of, where, context)
    if good is None:
        return results
    in_team = {h.name for h in site.group("vllm") if h.config.team is not None}
    signed_ok = [(c, r) for (c, _), r in zip(jobs, results, strict=False)
                 if r.auth_status == 200]
    # a model identity's keys: a team's own their whole bucket (delete too, for LMCache's
    # per-salt eviction), which team-isolation checks; none: no least-privilege probe
    model_keys = next(((c, r.credentials_from) for c, r in signed_ok
                       if r.credentials_from not in in_team), None)
    source = model_keys[1] if model_keys else None
    # the round trip below: with the first keys that signed, in their host's bucket
    good_source = next(r.credentials_from for r in results if r.auth_status == 200)
    host_header = headers.get(good_source, site_header)
    if model_keys is not None:
        obs.privilege = privilege_probe.probe(healthy[0], port, headers.get(
                                              source or "", site_header), region,
                                              model_keys[0], model_keys[1], context,
                                              prefixes.get(model_keys[1], ""))
    signed = {r.credentials_from: c for (c, _), r in zip(jobs, results, strict=False)
              if r.auth_status == 200}
    obs.isolation = _isolation(site, signed, (healthy[0], port, obs.fqdn, region), context)
    trips = [pool.submit(s3_probe.roundtrip,
                         S3Probe(address=a, host_header=host_header,
                                 credentials_from="round trip", purpose="roundtrip"),
                         # the lifecycle with the serving identity only where the admin
                         # host's read is missing (--limit): it is refused without the policy
                         port, region, good, size, i == 0 and obs.lifecycle is None, context)
             for i, a in enumerate(healthy)]
    return results + [t.result() for t in trips]


# keys no model of any site writes: where a one-model site's identity must be refused too
NO_MODEL_PREFIX = "deploykit-verify-no-model/"


def _isolation(site: Site, signed: dict[str, Credentials], at: tuple[str, int, str, str],
               context: ssl.SSLContext | None) -> list[IsolationProbe]:
    """Each identity (the keys of its first host that signed) against every other
    identity's keys, in that identity's bucket (a team's keys against another team's
    bucket): the first key that identity stored (listed with its own keys), else a
    made-up one under its prefix."""
    address, port, fqdn, region = at
    found = []
    models = identities(site)
    # a team's identity owns its whole bucket, checked by team-isolation; a model's identity
    # is probed against the other models' prefixes of a bucket it shares (in another
    # bucket's policy it is named nowhere)
    models = [m for m in models if m.team is None]
    for model in models:
        host = next((h for h in model.hosts if h in signed), None)
        if host is None:
            continue
        own = (address, port, f"{model.buckets[0]}.{fqdn}", region)
        # one model: a prefix no model owns is as foreign (a team's bucket is all its own)
        if len(models) == 1 and model.team is None:
            found.append(privilege_probe.isolation(
                *own, IsolationProbe(model.uid, host, model.prefixes[0], "no model",
                                     NO_MODEL_PREFIX), signed[host], None, context))
        for other in models:
            their = next((h for h in other.hosts if h in signed), None)
            if other.uid == model.uid or not set(other.buckets) & set(model.buckets):
                continue
            where = (address, port, f"{other.buckets[0]}.{fqdn}", region)
            for prefix in other.prefixes:
                try:
                    target = privilege_probe.first_key(*where, signed[their], prefix, context) \
                        if their else None
                except (OSError, ET.ParseError):
                    target = None
                found.append(privilege_probe.isolation(
                    *where, IsolationProbe(model.uid, host, model.prefixes[0], other.uid,
                                           prefix), signed[host], target, context))
    return found


def _team_isolation(site: Site, creds_of: dict[str, Credentials],
                    where: tuple[str, int, str, str], context: ssl.SSLContext | None
                    ) -> list[TeamIsolationProbe]:
    """Each team's identity (its first serving host whose keys were read) on its own bucket
    and on every other team's; nothing where the site has fewer than two teams."""
    buckets = team_buckets(site)
    if len(buckets) < 2:
        return []
    found = []
    for team, bucket in sorted(buckets.items()):
        host = next((h.name for h in site.group("vllm") if h.name in creds_of
                     and h.config.team is not None and h.config.team.name == team), None)
        if host is None:
            continue  # the check says why (no serving host, or none whose keys were read)
        found.append(team_probe.isolation(
            *where, TeamIsolationProbe(team, host, bucket), creds_of[host],
            {t: b for t, b in buckets.items() if t != team}, context))
    return found


def _encryption(site: Site, creds_of: dict[str, Credentials],
                where: tuple[str, int, str, str], context: ssl.SSLContext | None
                ) -> list[EncryptionProbe]:
    """One chunk per (bucket, model) of the hosts that encrypt their L2, listed and read
    with the first such host's keys whose keys were read."""
    found: dict[tuple[str, str], EncryptionProbe] = {}
    for host in site.group("vllm"):
        c = host.config
        if not encrypts(host) or host.name not in creds_of:
            continue
        prefix = layout_prefix(c) or ""
        if (c.cache_bucket, prefix) in found:
            continue
        found[(c.cache_bucket, prefix)] = team_probe.encryption(
            *where, EncryptionProbe(c.cache_bucket, host.name, prefix,
                                    object_bytes(c, host.geometry)), creds_of[host.name],
            context)
    return list(found.values())


def encrypts(host: Host) -> bool:
    """The host's LMCache server encrypts what it stores in S3 (lmcache_l2_encryption)."""
    c = host.config
    return c.lmcache_l2_encryption and not serving_host(host).inprocess and c.lmcache_mode == "s3"


def team_buckets(site: Site) -> dict[str, str]:
    s = site.settings
    return {t.name: team_bucket(t, s.deploykit_s3_bucket) for t in s.teams}


def storage_measurement(path: Path, site_name: str) -> StorageMeasurement | None:
    """The site's last `bench storage` result at `path`, or None (absent, another site's,
    unreadable, or without an awscrt GET through the name)."""
    import json

    try:
        doc = json.loads(path.read_text())
        if doc.get("site") != site_name or not doc.get("breakeven"):
            return None
        return StorageMeasurement(str(doc["measured_from"]),
                                  float(doc["breakeven"]["measured_gbps"]),
                                  str(doc.get("generated", "?")), str(path))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
