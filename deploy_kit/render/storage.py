"""Ceph side: pool commands, cephadm RGW spec, packages-mode gateway config, concentrator."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from deploy_kit import compat
from deploy_kit.config.models import HostConfig
from deploy_kit.config.site import Host, Site
from deploy_kit.render.lmcache import dump_yaml
from deploy_kit.render.names import rgw_instance_names
from deploy_kit.render.templating import render_template


@dataclass(frozen=True)
class Gateway:
    name: str
    address: str
    port: int


def gateways(host: Host) -> list[Gateway]:
    c = host.config
    return [Gateway(name, host.address, c.ceph_rgw_frontend_port + i)
            for i, name in enumerate(rgw_instance_names(host.name, c.ceph_rgw_count_per_host))]


def deploykit_manages_concentrator(c: HostConfig) -> bool:
    """cephadm runs the concentrator only where the Ceph version has it; else deploykit does."""
    if c.ceph_rgw_mode == "packages":
        return True
    return not compat.ceph(c.deploykit_ceph_version).has_concentrator


def rgw_spec(site: Site) -> dict[str, Any]:
    """cephadm RGW service spec; `concentrator` only where the Ceph version supports it."""
    c = site.settings
    spec: dict[str, Any] = {
        "rgw_exit_timeout_secs": c.ceph_rgw_exit_timeout_secs,
        "rgw_frontend_port": c.ceph_rgw_frontend_port,
    }
    if not deploykit_manages_concentrator(c):
        spec |= {"concentrator": "haproxy",
                 "concentrator_frontend_port": c.deploykit_s3_port,
                 "concentrator_monitor_port": c.ceph_rgw_concentrator_monitor_port,
                 "concentrator_monitor_user": c.ceph_rgw_concentrator_monitor_user}
    doc: dict[str, Any] = {
        "service_type": "rgw",
        "service_id": c.ceph_rgw_service_id,
        "service_name": f"rgw.{c.ceph_rgw_service_id}",
        "placement": {"count_per_host": c.ceph_rgw_count_per_host,
                      "hosts": sorted(h.name for h in site.group("rgw"))},
    }
    if c.ceph_rgw_networks:
        doc["networks"] = list(c.ceph_rgw_networks)
    doc["spec"] = spec
    return doc


def render_rgw_spec(site: Site) -> str:
    return dump_yaml(rgw_spec(site))


def render_pools_script(site: Site) -> str:
    admin = site.group("ceph_admin")
    c = admin[0].config if admin else site.settings
    return render_template(
        "rgw-pools.sh.j2", pools=c.ceph_rgw_pools_list, noautoscale=c.ceph_rgw_pools_noautoscale,
        noautoscale_flag=compat.ceph(c.deploykit_ceph_version).has_noautoscale_flag)


def lifecycle_rules(c: HostConfig) -> dict[str, Any]:
    """Bucket expiry is the cache's eviction: objects older than N days are deleted."""
    rule: dict[str, Any] = {"ID": "deploykit-expire-kv", "Status": "Enabled",
                            "Filter": {"Prefix": ""},
                            "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 1}}
    if c.ceph_rgw_s3_lifecycle_days:
        rule["Expiration"] = {"Days": c.ceph_rgw_s3_lifecycle_days}
    return {"Rules": [rule]}


def render_rgw_conf(host: Host) -> str:
    c = host.config
    return render_template("ceph-rgw.conf.j2", daemons=gateways(host), host=host.name,
                           fsid=c.deploykit_ceph_fsid, mon_host=c.deploykit_ceph_mon_host,
                           fqdn=c.deploykit_s3_fqdn, thread_pool_size=c.ceph_rgw_thread_pool_size,
                           exit_timeout=c.ceph_rgw_exit_timeout_secs)


def render_haproxy(host: Host) -> str:
    c = host.config
    return render_template("haproxy.cfg.j2", bind_address="*", frontend_port=c.deploykit_s3_port,
                           monitor_port=c.ceph_rgw_concentrator_monitor_port,
                           maxconn=c.ceph_rgw_concentrator_maxconn,
                           backends=gateways(host))
