"""Read every host once, concurrently: one script per host through Ansible's connection layer
(transport.hosts, as verify), the CoreDNS answers from the controller, Consul's view from a
Consul server, and this controller's run records. Reads only: no lock, nothing written."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

from deploy_kit.config.site import Host, Site
from deploy_kit.project import runs_root
from deploy_kit.status import model, probe, runs
from deploy_kit.transport.hosts import ShellResult, run_many, sections
from deploy_kit.verify.gather import planned_consul
from deploy_kit.verify.model import ConsulView, DnsAnswer
from deploy_kit.verify.probes import consul_probe, dns_probe


def gather(site: Site, reach: set[str] | None = None, workers: int = 16) -> model.SiteStatus:
    """Every host (or those `reach` names: --limit) read once; DNS and Consul asked only on
    the hosts within reach, as verify does."""
    hosts = [h for h in site.hosts.values() if reach is None or h.name in reach]
    s = site.settings
    view = planned_consul(site)
    servers = [h for h in site.group("consul_servers") if reach is None or h.name in reach] \
        if view is not None else []
    jobs = [(h, probe.script(h)) for h in hosts] + \
        [(h, consul_probe.script(s.consul_http_port, s.consul_service_name)) for h in servers]
    dns_servers = sorted({h.address for h in site.group("dns")
                          if reach is None or h.name in reach})
    with ThreadPoolExecutor(max_workers=workers) as pool:
        shell = pool.submit(run_many, site, jobs, probe.TIMEOUT)
        answers = {a: pool.submit(dns_probe.ask, a, s.deploykit_s3_fqdn, "udp", s.coredns_port)
                   for a in dns_servers}
        recorded = pool.submit(runs.converge_runs, runs_root(), list(site.inventory_sources))
        results = shell.result()
        dns = {a: j.result() for a, j in answers.items()}
        history = recorded.result()
    status = model.SiteStatus(hosts=[])
    # results: the hosts' scripts in order, then the Consul servers' reads
    for host, result in zip(hosts, results[:len(hosts)], strict=True):
        status.hosts.append(_host(host, result.stdout, result.error))
        if result.error is None and "ceph_admin" in host.groups:
            answer = sections(result.stdout).get("ceph_versions", "")
            status.ceph_daemons = model.parse_ceph_versions(answer)
            if not status.ceph_daemons:
                first = next((ln.strip() for ln in answer.splitlines() if ln.strip()), "")
                status.notes.append(f"ceph: `ceph versions` on {host.name} gave no daemon "
                                    f"versions: {first[:200] or 'no answer'}")
    for host_status in status.hosts:
        host_status.converge.last_run = runs.last_run(history, host_status.name)
    _dns(site, status, dns)
    if view is not None:
        _consul(site, status, view, list(zip((h.name for h in servers),
                                             results[len(hosts):], strict=True)))
    elif s.deploykit_dns_mode == "consul":
        status.notes.append("consul: no Consul server in the inventory")
    if site.group("dns") and not dns_servers:
        status.notes.append("dns: every CoreDNS is outside --limit: DNS membership not read")
    if view is not None and not servers:
        status.notes.append("consul: every Consul server is outside --limit: membership "
                            "not read")
    return status


def _host(host: Host, stdout: str, error: str | None) -> model.HostStatus:
    if error is not None:
        return model.HostStatus(name=host.name, address=host.address,
                                groups=sorted(host.groups), reachable=False, error=error)
    return model.parse(host.name, host.address, list(host.groups), sections(stdout))


def _dns(site: Site, status: model.SiteStatus, dns: dict[str, DnsAnswer]) -> None:
    """A gateway is in DNS when every CoreDNS that answered gave its address for the S3
    name; a server that did not answer is a note, and no gateway's membership rests on it."""
    gateways = {h.name for h in site.group("rgw")}
    answered = {a: set(ans.addresses) for a, ans in dns.items() if ans.error is None}
    for server, ans in sorted(dns.items()):
        if ans.error is not None:
            status.notes.append(f"dns: CoreDNS {server} did not answer "
                                f"{site.settings.deploykit_s3_fqdn}: {ans.error}")
    for host in status.hosts:
        if host.name not in gateways:
            continue
        host.membership.dns_servers = {a: host.address in addresses
                                       for a, addresses in sorted(answered.items())}
        if answered:
            host.membership.dns = all(host.membership.dns_servers.values())


def _consul(site: Site, status: model.SiteStatus, view: ConsulView,
            results: list[tuple[str, ShellResult]]) -> None:
    """Each Consul node's serf status, and each gateway's s3 service health (its worst
    check: passing, warning, critical, maintenance), from the first server that answered."""
    if not results:
        return
    seen = consul_probe.from_output(view, results)
    if seen.error is not None:
        status.notes.append(f"consul: {seen.error}")
        return
    members = {m.name: m.status for m in seen.members}
    answered = dict(results)[seen.server]
    health = model.consul_service_states(json.loads(sections(answered.stdout)["health"]))
    nodes = set(seen.expected_nodes)
    for host in status.hosts:
        if host.name in nodes:
            host.membership.consul_member = members.get(host.name, "absent")
        if host.name in seen.rgw_nodes:
            host.membership.consul_s3 = health.get(host.name, "absent")
