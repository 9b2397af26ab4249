"""The router group: it has backends, they agree on what a router is given, and the flags
deploykit sets are deploykit's (render/router.py)."""

from __future__ import annotations

from collections.abc import Iterator

from deploy_kit.config import names
from deploy_kit.config.instances import instance_count
from deploy_kit.config.rulebook import collector
from deploy_kit.config.rulebook import src as _src
from deploy_kit.config.site import Host, Site
from deploy_kit.core import router_lock
from deploy_kit.core.errors import Problem

RULES, rule = collector()

# vllm-router flags render/router.py writes from the plan; in router_extra_args a second
# value would contradict it (or, for --api-key, put the key in a world-readable unit)
OWNED_FLAGS = {
    "--worker-urls": "every vLLM instance of the site, from the plan",
    "--policy": "router_routing_logic",
    "--host": "127.0.0.1 (the router front owns router_port)",
    "--port": "router_loopback_port",
    "--prometheus-host": "127.0.0.1 (the front passes /metrics on)",
    "--prometheus-port": "router_metrics_port",
    "--kv-event-source": "every instance's KV events, from the plan",
    "--kv-event-model": "the backends' served model name",
    "--api-key": "the site's vLLM API key, from a 0600 file (never argv)",
    "--service-discovery": "static backends from the plan",
}
# what the router is given about the KV its backends hold: the backends must share it. The
# effective block size (a default differs per accelerator); the chunk hash seed of one
# model is already one value (rules_lmcache's fleet agreement, by model)
AGREED = (("served model name", "vllm_served_model_name"),
          ("block size", "vllm_block_size"))


def _block_size(host: Host) -> int | None:
    try:
        return host.block_size
    except ValueError:  # an unsupported vLLM: versions_supported reports it
        return None


def _agreed_value(host: Host, what: str) -> object:
    c = host.config
    return {"served model name": c.served_model_name, "block size": _block_size(host)}[what]


def _first_router(site: Site) -> Host | None:
    routers = site.group("router")
    return routers[0] if routers else None


@rule
def router_has_backends(site: Site) -> Iterator[Problem]:
    """A router group needs vLLM instances to route to."""
    router = _first_router(site)
    if router is None or any(instance_count(h.config) for h in site.group("vllm")):
        return
    yield Problem(site.hosts_file, "router", "the router group has hosts but the site has no "
                  "vllm hosts: the routers would have no backends",
                  "add the serving hosts to the vllm group, or remove the router group",
                  hosts=tuple(h.name for h in site.group("router")))


@rule
def router_backends_agree(site: Site) -> Iterator[Problem]:
    """Every instance behind the routers serves one model with one block size: a router
    sends any request to any backend, and what it is told about the KV they hold (kvaware:
    --kv-event-model, --kv-event-block-size) is one value. With one model, the fleet
    agreement (rules_lmcache) holds the chunk hash seed to one value too."""
    if _first_router(site) is None:
        return
    backends = site.group("vllm")
    for what, key in AGREED:
        by_value: dict[str, list[Host]] = {}
        for host in backends:
            value = _agreed_value(host, what)
            if value is not None:
                by_value.setdefault(str(value), []).append(host)
        if len(by_value) < 2:
            continue
        ranked = sorted(by_value.items(), key=lambda e: -len(e[1]))
        fleet_value = ranked[0][0]
        for value, hosts in ranked[1:]:
            yield Problem(_src(site, hosts[0], key), key,
                          f"{what} {value} differs from the other backends' {fleet_value}; "
                          "the routers send any request to any vLLM instance of the site",
                          f"give every vllm host {key} {fleet_value}, or run the odd hosts "
                          "as a site of their own", hosts=tuple(h.name for h in hosts))


@rule
def router_backends_one_team(site: Site) -> Iterator[Problem]:
    """The routers' backends are every vllm host of the site. With hosts of several teams
    (or of a team and of none) behind them, a team's request may be served, and its chunks
    stored, by another team's host, in that team's bucket with that team's keys: the RGW
    boundary between teams (docs/teams.md) would not hold."""
    router = _first_router(site)
    if router is None:
        return
    by_team: dict[str, list[Host]] = {}
    for host in site.group("vllm"):
        team = host.config.team
        by_team.setdefault(team.name if team else "(no team)", []).append(host)
    if len(by_team) < 2:
        return
    yield Problem(site.hosts_file, "router",
                  f"the routers send any request to any vllm host, and those serve teams "
                  f"{', '.join(sorted(by_team))}: a team's chunks could land in another "
                  "team's bucket", "route one team's hosts only (remove the router group, "
                  "or run each team as a site of its own); clients reach their team's hosts "
                  "directly (vllm_direct_sources)", hosts=(router.name,))


@rule
def router_flags_owned(site: Site) -> Iterator[Problem]:
    """router_extra_args cannot set what deploykit renders, nor a KV block size other than
    the backends' (the router would hash events and prompts into blocks vLLM never made)."""
    routers = site.group("router")
    backends = site.group("vllm")
    block = _block_size(backends[0]) if routers and backends else None
    for host in routers:
        words = host.config.router_extra_args
        for i, word in enumerate(words):
            flag = word.split("=", 1)[0]
            if flag in OWNED_FLAGS:
                yield Problem(_src(site, host, "router_extra_args"), "router_extra_args",
                              f"{flag} is deploykit's to set ({OWNED_FLAGS[flag]})",
                              "remove it from router_extra_args", hosts=(host.name,))
            elif flag == "--kv-event-block-size":
                value = word.split("=", 1)[1] if "=" in word else \
                    (words[i + 1] if i + 1 < len(words) else "")
                if block is not None and value != str(block):
                    yield Problem(_src(site, host, "router_extra_args"), "router_extra_args",
                                  f"--kv-event-block-size {value or '(no value)'} is not the "
                                  f"backends' block size {block}",
                                  "remove it: the router is given the backends' block size",
                                  hosts=(host.name,))


@rule
def router_kv_events_flow(site: Site) -> Iterator[Problem]:
    """kvaware routes by vLLM's KV events: every backend must publish them."""
    router = _first_router(site)
    if router is None or router.config.router_routing_logic != "kvaware":
        return
    silent = [h for h in site.group("vllm") if not h.config.vllm_kv_events]
    if silent:
        yield Problem(_src(site, silent[0], "vllm_kv_events"), "vllm_kv_events",
                      "false, but router_routing_logic kvaware routes by the instances' KV "
                      "events", "remove vllm_kv_events: false, or pick another "
                      "router_routing_logic", hosts=tuple(h.name for h in silent))
    no_cache = [h for h in site.group("vllm") if h.config.vllm_enable_prefix_caching is False]
    if no_cache:
        yield Problem(_src(site, no_cache[0], "vllm_enable_prefix_caching"),
                      "vllm_enable_prefix_caching",
                      "false: vLLM publishes a block's KV event when its prefix cache keeps "
                      "the block, so kvaware would see nothing",
                      "turn prefix caching on, or use router_routing_logic prefixaware",
                      hosts=tuple(h.name for h in no_cache))


@rule
def router_name_distinct(site: Site) -> Iterator[Problem]:
    """The routers' name is not the S3 name (CoreDNS would answer one of them only)."""
    router = _first_router(site)
    if router is None:
        return
    c = router.config
    if names.router_fqdn(c).lower() == c.deploykit_s3_fqdn.lower():
        yield Problem(_src(site, router, "router_fqdn"), "router_fqdn",
                      f"{names.router_fqdn(c)} is also the S3 name",
                      "give the routers a name of their own, e.g. llm.<domain>")
    if c.router_service_name == c.consul_service_name:
        yield Problem(_src(site, router, "router_service_name"), "router_service_name",
                      f"{c.router_service_name} is also the S3 service's name in Consul",
                      "leave router_service_name at llm, or pick another name")


@rule
def router_version_locked(site: Site) -> Iterator[Problem]:
    """The routers install vllm-router only from a hash-pinned lock deploykit ships
    (deploy_kit/data/router/): a version without one has nothing to install from."""
    known = router_lock.versions()
    for host in site.group("router"):
        version = host.config.router_version
        if version not in known:
            yield Problem(_src(site, host, "router_version"), "router_version",
                          f"{version} has no hash-pinned lock in this deploykit (locks: "
                          f"{', '.join(known) or 'none'})",
                          f"use {known[-1] if known else 'a version with a lock'}, or write "
                          f"its lock with tools/router_lock.py --version {version}",
                          hosts=(host.name,))
