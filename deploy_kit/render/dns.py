"""CoreDNS: the S3 name and its wildcard answer with every healthy concentrator."""

from __future__ import annotations

import zlib

from deploy_kit.config.names import COREDNS_DIR
from deploy_kit.config.site import Host, Site
from deploy_kit.render.templating import render_template


def zone_file_path(host: Host) -> str:
    return f"{COREDNS_DIR}/db.{host.config.deploykit_s3_fqdn}"


def render_corefile(site: Site, host: Host) -> str:
    c = host.config
    return render_template(
        "Corefile.j2", fqdn=c.deploykit_s3_fqdn, port=c.coredns_port, mode=c.deploykit_dns_mode,
        service=c.consul_service_name, consul_dns_port=c.consul_dns_port,
        consul_servers=sorted(h.address for h in site.group("consul_servers")),
        zone_file=zone_file_path(host), upstream=c.coredns_upstream,
        health_port=c.coredns_health_port, ready_port=c.coredns_ready_port,
        metrics_port=c.coredns_metrics_port)


def render_zone(site: Site, host: Host) -> str:
    c = host.config
    addresses = sorted(h.address for h in site.group("rgw"))
    # The serial follows the content, so re-renders are stable and changes bump it.
    serial = zlib.crc32(" ".join(addresses).encode()) % 4294967295
    return render_template("zone.db.j2", fqdn=c.deploykit_s3_fqdn, ttl=c.deploykit_dns_ttl,
                           serial=serial, ns_address=host.address, addresses=addresses)


def render_resolv_conf(site: Site) -> str:
    servers = sorted(h.address for h in site.group("dns"))
    lines = ["# Managed by deploykit; local changes are overwritten."]
    lines += [f"nameserver {s}" for s in servers[:3]]  # glibc reads at most three
    lines.append("options timeout:1 attempts:2 rotate")
    return "\n".join(lines) + "\n"
