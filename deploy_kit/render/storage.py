"""Ceph side: cephadm RGW spec, packages-mode gateway config, concentrator, bucket expiry."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from deploy_kit.config.models import HostConfig
from deploy_kit.config.names import HAPROXY_STATS_ENV_PATH as STATS_ENV_PATH
from deploy_kit.config.names import rgw_instance_names
from deploy_kit.config.site import Host, Site
from deploy_kit.core import compat
from deploy_kit.render.cephadm_spec import export_shape
from deploy_kit.render.lmcache import dump_yaml
from deploy_kit.render.templating import render_template
from deploy_kit.render.tls import HAPROXY_PEM_PATH


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
    """deploykit's own HAProxy unless the cephadm concentrator was chosen explicitly: no
    upstream Ceph up to 20.2.4 has its spec fields (compat.yaml `concentrator_min`)."""
    return c.ceph_rgw_mode == "packages" or c.ceph_rgw_concentrator == "deploykit"


def rgw_config(c: HostConfig) -> dict[str, Any]:
    """radosgw options for the spec's `config:` (the mon config database on every release)."""
    ceph = compat.ceph(c.deploykit_ceph_version)
    # rgw_dns_name: RGW routes Host `<bucket>.<fqdn>` to the bucket only when it knows the
    # base name; LMCache sends only virtual-hosted requests (research/lmcache-rgw-roundtrip.md)
    config: dict[str, Any] = {"rgw_dns_name": c.deploykit_s3_fqdn,
                              "rgw_exit_timeout_secs": str(c.ceph_rgw_exit_timeout_secs)}
    if ceph.has_graceful_stop:  # Tentacle: drain requests in flight within the exit timeout
        config["rgw_graceful_stop"] = "true"
    return config


def multisite_names(c: HostConfig) -> dict[str, str]:
    """The spec's rgw_realm/rgw_zonegroup/rgw_zone, all three or none (a rule refuses one
    or two: cephadm would fail the service on the missing ones)."""
    names = {"rgw_realm": c.ceph_rgw_realm, "rgw_zonegroup": c.ceph_rgw_zonegroup,
             "rgw_zone": c.ceph_rgw_zone}
    return {k: v for k, v in names.items() if v} if all(names.values()) else {}


def rgw_spec(site: Site) -> dict[str, Any]:
    """cephadm RGW service spec with only the fields the pinned Ceph's RGWSpec accepts."""
    c = site.settings
    ceph = compat.ceph(c.deploykit_ceph_version)
    spec: dict[str, Any] = {"rgw_frontend_port": c.ceph_rgw_frontend_port}
    multisite = multisite_names(c)
    if multisite:
        spec |= multisite
        # Squid on: cephadm writes the S3 name into the zonegroup's hostnames. Its
        # RgwService.config() runs `rgw zonegroup modify` with the spec's realm, zonegroup
        # and zone, which the rgw mgr module refuses when any is unset ("Realm name is a
        # mandatory parameter") before it places a daemon, so the field needs all three
        # (ceph/ceph src/pybind/mgr/cephadm/services/cephadmservice.py, src/pybind/mgr/rgw).
        if ceph.has_zonegroup_hostnames:
            spec["zonegroup_hostnames"] = [c.deploykit_s3_fqdn]
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
    # The container runtime's own stop timeout (podman/docker default 10 s) would kill a
    # gateway that drains for up to rgw_exit_timeout_secs; 10 s more lets RGW exit itself
    # (ceph.io "simplifying object ... new cephadm" pairs the three settings)
    doc["extra_container_args"] = [f"--stop-timeout={c.ceph_rgw_exit_timeout_secs + 10}"]
    doc["config"] = rgw_config(c)
    doc["spec"] = spec
    # written as `ceph orch ls --export` gives it back (config under spec:), so the role's
    # comparison finds nothing to change on a re-run
    return dict(export_shape(doc))


def render_rgw_spec(site: Site) -> str:
    return dump_yaml(rgw_spec(site))


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
                           exit_timeout=c.ceph_rgw_exit_timeout_secs,
                           graceful_stop=compat.ceph(c.deploykit_ceph_version).has_graceful_stop)


def render_haproxy(host: Host) -> str:
    c = host.config
    return render_template("haproxy.cfg.j2", bind_address="*", frontend_port=c.deploykit_s3_port,
                           monitor_port=c.ceph_rgw_concentrator_monitor_port,
                           maxconn=c.ceph_rgw_concentrator_maxconn,
                           backends=gateways(host), stats_env_file=HAPROXY_STATS_ENV_PATH,
                           # the monitor port (/health, /metrics) stays plain HTTP: Consul's
                           # check, the role's health gate and Prometheus read it on the host
                           # network; the stats page (a login) is on loopback unless opted out
                           stats_port=c.ceph_rgw_concentrator_stats_port,
                           stats_public=c.ceph_rgw_concentrator_stats_public,
                           tls_pem=HAPROXY_PEM_PATH if c.deploykit_s3_tls else None)


HAPROXY_STATS_ENV_PATH = STATS_ENV_PATH  # config/names.py: the converge record watches it
HAPROXY_DROPIN_PATH = "/etc/systemd/system/haproxy.service.d/deploykit-stats.conf"


def render_haproxy_dropin() -> str:
    """haproxy.service reads the stats login; no `-`: a missing file fails the start, so the
    stats page is never served with an empty login."""
    return render_template("haproxy-stats.conf.j2", env_file=HAPROXY_STATS_ENV_PATH)


def render_haproxy_stats_env(host: Host) -> str:
    """Marker only in the tree; the role writes the vault's (or a generated) password 0600."""
    c = host.config
    return render_template("vllm.env.j2", env={
        "DEPLOYKIT_STATS_USER": c.ceph_rgw_concentrator_monitor_user,
        "DEPLOYKIT_STATS_PASSWORD": "<vault:ceph_rgw_concentrator_monitor_password>"})
