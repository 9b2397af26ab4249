"""The TCP ports deploykit's services claim on each host, and the rule that no two share one."""

from __future__ import annotations

from collections.abc import Iterator

from deploy_kit.config import names
from deploy_kit.config.instances import instance_count
from deploy_kit.config.rulebook import collector
from deploy_kit.config.rulebook import src as _src
from deploy_kit.config.site import Host, Site
from deploy_kit.core.errors import Problem

RULES, rule = collector()


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
    if c.deploykit_dns_mode == "consul" and host.groups & names.CONSUL_AGENT_GROUPS:
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
    if c.deploykit_dns_mode == "consul" and host.groups & names.CONSUL_AGENT_GROUPS:
        claims += [(c.consul_dns_port, "consul_dns_port"), (c.consul_http_port, "consul_http_port")]
    if "vllm" in host.groups:
        # every instance's front listens on vllm_port + i, and vLLM itself on 127.0.0.1 at
        # vllm_loopback_port + i (config/instances.py): one port space on the host
        claims += [(c.vllm_port + i, "vllm_port") for i in range(instance_count(c))]
        claims += [(c.vllm_loopback_port + i, "vllm_loopback_port")
                   for i in range(instance_count(c))]
        if c.lmcache_server:
            claims += [(c.lmcache_server_port, "lmcache_server_port"),
                       (c.lmcache_server_http_port, "lmcache_server_http_port"),
                       (c.lmcache_server_metrics_port, "lmcache_server_metrics_port")]
        if c.vllm_kv_events:  # the front passes port + i on to vLLM's publisher on loopback
            claims += [(c.vllm_kv_events_port + i, "vllm_kv_events_port")
                       for i in range(instance_count(c))]
            claims += [(c.vllm_kv_events_loopback_port + i, "vllm_kv_events_loopback_port")
                       for i in range(instance_count(c))]
        if monitored and c.monitoring_node_exporter_install:
            claims.append((c.monitoring_node_exporter_port, "monitoring_node_exporter_port"))
    if "router" in host.groups:
        claims += [(c.router_port, "router_port"), (c.router_loopback_port, "router_loopback_port"),
                   (c.router_metrics_port, "router_metrics_port")]
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


# addresses_distinct: one machine under two names is rules_inventory.one_name_per_machine
