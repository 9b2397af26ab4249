"""Consul agent configuration and the `s3` service whose check targets the concentrator."""

from __future__ import annotations

import json
from typing import Any

from deploy_kit.config.models import HostConfig
from deploy_kit.config.site import Host, Site
from deploy_kit.render import consul_tls


def consul_scrapable(c: HostConfig) -> bool:
    """Prometheus can read this agent's metrics: its API listens beyond loopback, and no
    ACL asks for the agent:read token deploykit does not give Prometheus."""
    return not c.consul_http_address.startswith("127.") and not c.consul_acl_enabled


def _with_loopback(address: str) -> str:
    """The roles and verify talk to the agent on 127.0.0.1: an API opened on one address
    also keeps loopback (0.0.0.0 already includes it)."""
    return address if address in ("0.0.0.0", "::") else " ".join(
        dict.fromkeys(["127.0.0.1", address]))


def service_names(site: Site, c: HostConfig) -> list[str]:
    """The services this site's agents register: s3, and the routers' where it has any."""
    return [c.consul_service_name] + ([c.router_service_name] if site.group("router") else [])


def agent_config(site: Site, host: Host) -> dict[str, Any]:
    c = host.config
    servers = site.group("consul_servers")
    is_server = host in servers
    cfg: dict[str, Any] = {
        "datacenter": c.consul_datacenter,
        "data_dir": c.consul_data_dir,
        "node_name": host.name,
        "bind_addr": host.address,
        # the HTTP API on loopback (consul_http_address); DNS also on the host's address,
        # which CoreDNS forwards to (Consul binds each space-separated address)
        "client_addr": _with_loopback(c.consul_http_address),
        "addresses": {"dns": " ".join(dict.fromkeys(["127.0.0.1", host.address]))},
        "retry_join": sorted(s.address for s in servers),
        "server": is_server,
        "ports": {"dns": c.consul_dns_port, "http": c.consul_http_port},
        "dns_config": {
            "only_passing": True,  # a failing concentrator leaves DNS at once
            "enable_truncate": True,
            "service_ttl": {name: f"{c.deploykit_dns_ttl}s" for name in service_names(site, c)},
        },
        "enable_script_checks": False,
        "log_level": "INFO",
    }
    if consul_scrapable(c):  # /v1/agent/metrics?format=prometheus needs a retention time
        cfg["telemetry"] = {"prometheus_retention_time": "60s", "disable_hostname": True}
    if is_server:
        cfg["bootstrap_expect"] = c.consul_bootstrap_expect or len(servers)
        cfg["ui_config"] = {"enabled": True}
    if c.consul_raft_multiplier is not None:
        cfg["performance"] = {"raft_multiplier": c.consul_raft_multiplier}
    if c.consul_retry_interval is not None:
        cfg["retry_interval"] = c.consul_retry_interval
    if c.consul_leave_on_terminate is not None:
        cfg["leave_on_terminate"] = c.consul_leave_on_terminate
    if c.consul_acl_enabled:
        # The tokens live in SECRETS_PATH (0600, written by the role from the vault, never
        # rendered); Consul merges that file into this block.
        cfg["acl"] = {"enabled": True, "default_policy": c.consul_acl_default_policy,
                      "down_policy": "extend-cache", "enable_token_persistence": False}
    if c.consul_gossip_encryption:
        cfg["encrypt_verify_incoming"] = True
        cfg["encrypt_verify_outgoing"] = True
    if consul_tls.enabled(host):
        # mutual TLS on internal RPC, servers checked by name (render/consul_tls.py); the
        # HTTP API stays plain on loopback for the roles and verify, so no HTTPS or gRPC-TLS
        # port is opened (-1 keeps Consul from opening one by default)
        cfg["tls"] = consul_tls.tls_stanza()
        cfg["ports"]["grpc_tls"] = -1
    return cfg


# Written by the consul role from vault variables (mode 0600, owner consul); not rendered.
SECRETS_PATH = "/etc/consul.d/secrets.json"

# ACL policies the consul role creates on first converge (rules in Consul's HCL syntax).
ACL_POLICIES = {
    "deploykit-agent": 'node_prefix "" { policy = "write" }\n'
                       'service_prefix "" { policy = "read" }\n'
                       'agent_prefix "" { policy = "write" }\n',  # `consul reload`
    "deploykit-dns": 'node_prefix "" { policy = "read" }\n'
                     'service_prefix "" { policy = "read" }\n'
                     'query_prefix "" { policy = "read" }\n',
}


def service_policy(site: Site, host: Host) -> tuple[str, str]:
    """The registration token's policy: write on every service the site's agents register
    (the routers' too, where the site has routers; the role updates a policy whose rules
    changed)."""
    name = host.config.consul_service_name
    return f"deploykit-service-{name}", "".join(
        f'service "{s}" {{ policy = "write" }}\n' for s in service_names(site, host.config))


def acl_plan(site: Site, host: Host) -> dict[str, Any]:
    """Policies and which vault variable holds each token's SecretID: what the consul role
    creates through the API with the management token (no secret in here)."""
    service_name, service_rules = service_policy(site, host)
    policies = {**ACL_POLICIES, service_name: service_rules}
    return {
        "policies": [{"Name": n, "Rules": r} for n, r in policies.items()],
        "tokens": [
            {"var": "consul_acl_agent_token", "Description": "deploykit: agents",
             "Policies": [{"Name": "deploykit-agent"}]},
            {"var": "consul_acl_service_token",
             "Description": f"deploykit: registers {host.config.consul_service_name}",
             "Policies": [{"Name": service_name}]},
            {"var": "consul_acl_dns_token", "Description": "deploykit: DNS and verify (read)",
             "Policies": [{"Name": "deploykit-dns"}]},
        ],
    }


def s3_service(host: Host) -> dict[str, Any]:
    """Registered on every RGW host; healthy only while its concentrator has a live gateway."""
    c = host.config
    return {"service": {
        "name": c.consul_service_name,
        "id": f"{c.consul_service_name}-{host.name}",
        "address": host.address,
        "port": c.deploykit_s3_port,
        "tags": ["rgw", "concentrator"],
        "checks": [{
            "id": f"{c.consul_service_name}-{host.name}-concentrator",
            "name": "RGW concentrator health",
            "http": f"http://{host.address}:{c.ceph_rgw_concentrator_monitor_port}/health",
            "interval": c.consul_check_interval,
            "timeout": c.consul_check_timeout,
        }],
    }}


def dump_json(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=2, sort_keys=False) + "\n"
