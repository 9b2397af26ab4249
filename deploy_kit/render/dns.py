"""CoreDNS: the S3 name and its wildcard answer with every healthy concentrator."""

from __future__ import annotations

import ipaddress
import zlib

from deploy_kit.config.names import COREDNS_DIR, router_fqdn
from deploy_kit.config.site import Host, Site
from deploy_kit.render.templating import render_template


def zone_file_path(host: Host) -> str:
    return f"{COREDNS_DIR}/db.{host.config.deploykit_s3_fqdn}"


def router_zone_file_path(host: Host) -> str:
    return f"{COREDNS_DIR}/db.{router_fqdn(host.config)}"


def router_name(site: Site, host: Host) -> str | None:
    """The routers' name where the site has routers (names.router_fqdn), else None."""
    return router_fqdn(host.config) if site.group("router") else None


# always answered: the host's own loopback (`dig @127.0.0.1` there); not routable from afar
LOOPBACK_NETWORKS = ("127.0.0.1/32", "::1/128")
LOOPBACK_BIND = "127.0.0.1"


def site_networks(site: Site) -> list[str]:
    """The default clients: the /24 (IPv4) or /64 (IPv6) around each inventory host's
    address, so a host's neighbours on its subnet (a new serving host, an operator's
    machine) resolve too, while the rest of the world gets REFUSED."""
    nets: set[ipaddress.IPv4Network | ipaddress.IPv6Network] = set()
    for h in site.hosts.values():
        try:
            address = ipaddress.ip_address(h.address)
        except ValueError:  # a name: nothing to derive (site rules want addresses)
            continue
        nets.add(ipaddress.ip_network(f"{address}/{24 if address.version == 4 else 64}",
                                      strict=False))
    return [str(n) for n in sorted(nets, key=lambda n: (n.version, n))]


def allowed_networks(site: Site, host: Host) -> list[str]:
    given = host.config.coredns_allowed_networks
    nets = site_networks(site) if given is None else given
    return list(dict.fromkeys([*LOOPBACK_NETWORKS, *nets]))


def bind_addresses(host: Host) -> list[str]:
    """[] renders no `bind`: CoreDNS then listens on every address (the opt-out)."""
    given = host.config.coredns_bind
    return list(dict.fromkeys([host.address, LOOPBACK_BIND] if given is None else given))


def render_corefile(site: Site, host: Host) -> str:
    c = host.config
    return render_template(
        "Corefile.j2", fqdn=c.deploykit_s3_fqdn, port=c.coredns_port, mode=c.deploykit_dns_mode,
        bind=bind_addresses(host), allowed=allowed_networks(site, host),
        service=c.consul_service_name, consul_dns_port=c.consul_dns_port,
        consul_servers=sorted(h.address for h in site.group("consul_servers")),
        zone_file=zone_file_path(host), upstream=c.coredns_upstream,
        router_fqdn=router_name(site, host), router_service=c.router_service_name,
        router_zone_file=router_zone_file_path(host),
        health_port=c.coredns_health_port, ready_port=c.coredns_ready_port,
        metrics_port=c.coredns_metrics_port)


def render_zone(site: Site, host: Host, group: str = "rgw") -> str:
    """The static zone of the S3 name (every gateway), or with group `router` of the
    routers' name (every router)."""
    c = host.config
    fqdn = c.deploykit_s3_fqdn if group == "rgw" else router_fqdn(c)
    addresses = sorted(h.address for h in site.group(group))
    # The serial follows the content, so re-renders are stable and changes bump it.
    serial = zlib.crc32(" ".join(addresses).encode()) % 4294967295
    return render_template("zone.db.j2", fqdn=fqdn, ttl=c.deploykit_dns_ttl,
                           serial=serial, ns_address=host.address, addresses=addresses)


def render_resolv_conf(site: Site) -> str:
    servers = sorted(h.address for h in site.group("dns"))
    lines = ["# Managed by deploykit; local changes are overwritten."]
    lines += [f"nameserver {s}" for s in servers[:3]]  # glibc reads at most three
    lines.append("options timeout:1 attempts:2 rotate")
    return "\n".join(lines) + "\n"
