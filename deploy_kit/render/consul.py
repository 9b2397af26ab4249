"""Consul agent configuration and the `s3` service whose check targets the concentrator."""

from __future__ import annotations

import json
from typing import Any

from deploy_kit.config.site import Host, Site


def agent_config(site: Site, host: Host) -> dict[str, Any]:
    c = host.config
    servers = site.group("consul_servers")
    is_server = host in servers
    cfg: dict[str, Any] = {
        "datacenter": c.consul_datacenter,
        "data_dir": c.consul_data_dir,
        "node_name": host.name,
        "bind_addr": host.address,
        "client_addr": "0.0.0.0",
        "retry_join": sorted(s.address for s in servers),
        "server": is_server,
        "ports": {"dns": c.consul_dns_port},
        "dns_config": {
            "only_passing": True,  # a failing concentrator leaves DNS at once
            "enable_truncate": True,
            "service_ttl": {c.consul_service_name: f"{c.deploykit_dns_ttl}s"},
        },
        "enable_script_checks": False,
        "log_level": "INFO",
    }
    if is_server:
        cfg["bootstrap_expect"] = c.consul_bootstrap_expect or len(servers)
        cfg["ui_config"] = {"enabled": True}
    return cfg


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
