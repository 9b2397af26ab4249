"""Addresses that cannot work together (class 7 of the 2026-12-06 review).

site.address_problem refuses addresses no host can be reached at (unspecified, multicast,
link-local, reserved; IPv6 in the IPv4-only tiers); host_ports_distinct (rules_ports.py) every
port clash on one host. Here: what only the whole site shows. A loopback address reaches
only the host itself, so it is refused in a tier of peers whose others have real
addresses; Consul's HTTP address must be one the agent can bind; CoreDNS
must not forward to the site's own DNS servers (each would forward to the other); the
gateway networks must contain the gateways, whose certificates the CA may only vouch for
inside them.
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Iterator

from deploy_kit.config import names
from deploy_kit.config.rulebook import collector
from deploy_kit.config.rulebook import src as _src
from deploy_kit.config.site import Host, Site
from deploy_kit.core.errors import Problem

RULES, rule = collector()

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


@functools.cache
def _ip(value: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(value.strip("[]"))
    except ValueError:
        return None


def _is_loopback(address: str) -> bool:
    ip = _ip(address)
    return address.lower() in ("localhost", "localhost.localdomain") if ip is None \
        else ip.is_loopback


def _address_key(host: Host) -> str:
    return "deploykit_address" if host.config.deploykit_address else "ansible_host"


def _unusable(ip: IPAddress) -> str | None:
    """Why no packet to `ip` reaches a service on another host, or None."""
    if ip.is_unspecified:
        return "an unspecified address"
    if ip.is_multicast:
        return "a multicast address"
    if ip.version == 4 and ip == ipaddress.IPv4Address("255.255.255.255"):
        return "the broadcast address"
    if ip.is_link_local:
        return "a link-local address"
    if ip.is_reserved:
        return "a reserved address"
    return None


# tiers whose members are peers: DNS answers list every gateway, Consul servers join each
# other, clients ask any DNS server
PEER_TIERS = ("rgw", "consul_servers", "dns")


@rule
def loopback_only_among_loopback_peers(site: Site) -> Iterator[Problem]:
    """A loopback address in a tier whose other members have real addresses points every
    client (a DNS answer, a Consul join) at the client itself. A tier all on loopback is
    a one-machine test site and stays allowed."""
    for tier in PEER_TIERS:
        members = site.group(tier)
        loopback = [h for h in members if _is_loopback(h.address)]
        if not loopback or len(loopback) == len(members):
            continue
        for host in loopback:
            key = _address_key(host)
            yield Problem(_src(site, host, key), key,
                          f"{host.address} is a loopback address, but the other {tier} "
                          "hosts have real ones: clients given this one reach themselves",
                          "give the host's address on the site's network",
                          hosts=(host.name,))


@rule
def consul_http_address_bindable(site: Site) -> Iterator[Problem]:
    """Consul binds its HTTP API to consul_http_address: loopback, every address (0.0.0.0,
    ::) or the agent's own; another host's address cannot be bound."""
    if site.settings.deploykit_dns_mode != "consul":
        return
    for host in site.hosts.values():
        if not host.groups & names.CONSUL_AGENT_GROUPS:
            continue
        value = host.config.consul_http_address
        ip = _ip(value)
        if ip is None or ip.is_loopback or ip.is_unspecified or value == host.address:
            continue
        why = _unusable(ip) or "not the agent's own address"
        yield Problem(_src(site, host, "consul_http_address"), "consul_http_address",
                      f"{value} is {why}: the Consul agent cannot bind it",
                      "use 127.0.0.1 (the default), 0.0.0.0 or the host's own address, "
                      "set per host", hosts=(host.name,))


@rule
def dns_upstreams_usable(site: Site) -> Iterator[Problem]:
    """CoreDNS forwards other names to coredns_upstream: an address no resolver answers
    at, or one of the site's own DNS servers (which forward back: a loop), cannot work."""
    own = {h.address: h.name for h in site.group("dns")}
    for host in site.group("dns"):
        for entry in host.config.coredns_upstream:
            if entry.startswith("/"):
                continue
            address = entry[1:].split("]")[0] if entry.startswith("[") else \
                entry.split(":")[0] if entry.count(":") == 1 else entry
            ip = _ip(address)
            if ip is None:
                continue
            why = _unusable(ip)
            if why is None and address in own:
                why = f"the site's own DNS server {own[address]}, which would forward back"
            if why:
                yield Problem(_src(site, host, "coredns_upstream"), "coredns_upstream",
                              f"{entry} is {why}",
                              "give the addresses of the resolvers outside the site",
                              hosts=(host.name,))
                break


@rule
def scrape_targets_reachable(site: Site) -> Iterator[Problem]:
    """Prometheus scrapes monitoring_ceph_mgr_targets over the network."""
    for host in site.group("monitoring"):
        for entry in host.config.monitoring_ceph_mgr_targets:
            ip = _ip(entry.rpartition(":")[0])
            why = ip is not None and _unusable(ip)
            if why:
                yield Problem(_src(site, host, "monitoring_ceph_mgr_targets"),
                              "monitoring_ceph_mgr_targets", f"{entry} is {why}",
                              "give the mgr host's address and port", hosts=(host.name,))
                break


@rule
def rgw_networks_hold_gateways(site: Site) -> Iterator[Problem]:
    """ceph_rgw_networks: cephadm binds each gateway to an address in them, and the created
    CA may vouch only for them (its name constraints): every gateway's address must lie in
    one, or its certificate (which names that address) is refused by every client."""
    for host in site.group("rgw"):
        networks = host.config.ceph_rgw_networks
        ip = _ip(host.address)
        if not networks or ip is None:
            continue
        parsed = [ipaddress.ip_network(n, strict=False) for n in networks]
        if not any(ip.version == n.version and ip in n for n in parsed):
            yield Problem(_src(site, host, "ceph_rgw_networks"), "ceph_rgw_networks",
                          f"{', '.join(networks)} does not contain the gateway's address",
                          "add the gateways' network (CIDR)",
                          hosts=(host.name,))
