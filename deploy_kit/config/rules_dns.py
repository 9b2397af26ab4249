"""The DNS tier: CoreDNS's upstream, networks and bind addresses, Consul's quorum, node
names and TLS."""

from __future__ import annotations

import contextlib
import ipaddress
from collections.abc import Iterator

from deploy_kit.config import names
from deploy_kit.config.models import dns_name_problem
from deploy_kit.config.rulebook import collector
from deploy_kit.config.rulebook import src as _src
from deploy_kit.config.site import Site
from deploy_kit.core.errors import Problem

RULES, rule = collector()


@rule
def dns_upstream_not_itself(site: Site) -> Iterator[Problem]:
    """A CoreDNS host whose /etc/resolv.conf deploykit points at the site's CoreDNS (a
    serving host too) cannot take its upstream from that file: every other name would loop
    between the DNS servers until CoreDNS's `loop` plugin stops it."""
    for host in site.group("dns"):
        c = host.config
        if "vllm" in host.groups and c.resolver_manage and \
                "/etc/resolv.conf" in c.coredns_upstream:
            yield Problem(_src(site, host, "coredns_upstream"), "coredns_upstream",
                          f"{host.name} serves DNS and its /etc/resolv.conf is deploykit's "
                          "(it names the site's CoreDNS): the upstream would be itself",
                          "give the upstream resolvers' addresses, or resolver_manage: false "
                          "on this host", hosts=(host.name,))


@rule
def consul_quorum(site: Site) -> Iterator[Problem]:
    """bootstrap_expect cannot exceed the servers that exist, or Consul never elects."""
    servers = site.group("consul_servers")
    for host in servers:
        expect = host.config.consul_bootstrap_expect
        if expect is not None and expect > len(servers):
            yield Problem(_src(site, host, "consul_bootstrap_expect"),
                          "consul_bootstrap_expect",
                          f"{expect} > {len(servers)} hosts in consul_servers",
                          f"use at most {len(servers)}")
            return


@rule
def consul_node_names_usable(site: Site) -> Iterator[Problem]:
    """Every Consul agent's node name is its inventory name: a name Consul cannot serve, or
    two names one catalog treats as one node (its index ignores case), break registration."""
    if site.settings.deploykit_dns_mode != "consul":
        return
    agents = [h for h in site.hosts.values() if h.groups & names.CONSUL_AGENT_GROUPS]
    seen: dict[str, str] = {}
    for host in sorted(agents, key=lambda h: h.name):
        # host names (FQDN inventory names included); anything else (an underscore, a
        # space, a '/') makes Consul warn that DNS cannot name the node
        if dns_name_problem(host.name, min_labels=1):
            yield Problem(site.hosts_file, host.name, "is not a name Consul can give a node "
                          "(letters, digits, '-' and '.' only)",
                          "rename the host in the inventory (keep ansible_host as it is)",
                          hosts=(host.name,))
            continue
        other = seen.setdefault(host.name.lower(), host.name)
        if other != host.name:
            yield Problem(site.hosts_file, host.name, f"is the Consul node {other} (Consul "
                          "ignores case in node names)", "give each host a distinct name",
                          hosts=(other, host.name))


@rule
def coredns_answers_the_site(site: Site) -> Iterator[Problem]:
    """A coredns_allowed_networks list must hold every inventory host (each one's resolver
    asks the DNS hosts), and a coredns_bind of addresses the host's own address (the one
    resolv.conf names): else their lookups are refused or never arrive."""
    for dns in site.group("dns"):
        c = dns.config
        if c.coredns_allowed_networks is not None:
            nets = [ipaddress.ip_network(n) for n in c.coredns_allowed_networks]
            left_out = []
            for h in site.hosts.values():
                with contextlib.suppress(ValueError):
                    address = ipaddress.ip_address(h.address)
                    if not any(address in n for n in nets if n.version == address.version):
                        left_out.append(h.name)
            if left_out:
                yield Problem(_src(site, dns, "coredns_allowed_networks"),
                              "coredns_allowed_networks",
                              f"leaves out inventory hosts: CoreDNS on {dns.name} would refuse "
                              "their lookups", "add their addresses or networks",
                              hosts=tuple(sorted(left_out)))
        bind = c.coredns_bind or []
        addresses = []
        for entry in bind:
            with contextlib.suppress(ValueError):
                addresses.append(ipaddress.ip_address(entry))
        own = None
        with contextlib.suppress(ValueError):
            own = ipaddress.ip_address(dns.address)
        if own is not None and bind and len(addresses) == len(bind) and own not in addresses:
            yield Problem(_src(site, dns, "coredns_bind"), "coredns_bind",
                          f"does not hold {dns.name}'s address {dns.address}, which every "
                          "host's resolv.conf names", f"add {dns.address} (or an interface)",
                          hosts=(dns.name,))


@rule
def consul_tls_agrees(site: Site) -> Iterator[Problem]:
    """consul_tls_enabled is one value for every Consul agent: a TLS server refuses a plain
    agent's RPC. (The datacenter the server certificates name is one value for the whole
    site: site.SITE_KEYS.)"""
    agents = [h for h in site.hosts.values()
              if h.config.deploykit_dns_mode == "consul" and h.groups & names.CONSUL_AGENT_GROUPS]
    key = "consul_tls_enabled"
    values = [getattr(h.config, key) for h in agents]
    common = max(values, key=values.count) if values else None
    for host in (h for h, v in zip(agents, values, strict=True) if v != common):
        yield Problem(_src(site, host, key), key,
                      f"{host.name} has {getattr(host.config, key)!r}, the other Consul "
                      f"agents {common!r}", "use one value on every Consul agent (rgw "
                      "and consul_servers): a TLS agent and a plain one cannot talk RPC",
                      hosts=(host.name,))

