"""Consul (consul DNS mode): members alive, `s3` health per node, DNS agrees with Consul."""

from __future__ import annotations

from collections.abc import Iterator

from deploy_kit.verify.model import Finding, Observation, Status, check


@check("consul-members-alive", tags=("dns", "consul"),
       summary="every consul server and RGW host is an alive Consul member")
def members_alive(obs: Observation) -> Iterator[Finding]:
    view = obs.consul
    if view is None:
        return
    if view.error:
        yield Finding("consul-members-alive", Status.FAIL, "consul", f"no answer: {view.error}",
                      "is consul running on the consul_servers (systemctl status consul), "
                      "its API on consul_http_address/consul_http_port, and (with ACLs) "
                      "consul_acl_dns_token allowed to read nodes?")
        return
    status = {m.name: m for m in view.members}
    for node in view.expected_nodes:
        member = status.get(node)
        if member is None:
            yield Finding("consul-members-alive", Status.FAIL, node, "not a Consul member",
                          "the agent never joined: check retry_join and the gossip key")
        elif member.status != "alive":
            yield Finding("consul-members-alive", Status.FAIL, node,
                          f"member {member.status} ({member.address})",
                          "the host or its consul agent is down: its gateway is out of DNS")
        else:
            yield Finding("consul-members-alive", Status.PASS, node, f"alive ({member.address})")


@check("consul-service-health", tags=("dns", "consul"),
       summary="each RGW host's `s3` service instance is registered and passing")
def service_health(obs: Observation) -> Iterator[Finding]:
    view = obs.consul
    if view is None or view.error:
        return
    by_node = {i.node: i for i in view.instances}
    for node, address in sorted(view.rgw_nodes.items()):
        target = f"{view.service}@{node}"
        instance = by_node.get(node)
        if instance is None:
            yield Finding("consul-service-health", Status.FAIL, target,
                          f"not registered ({address} is out of DNS)",
                          "the node left or its agent is down, or (ACLs) the service token "
                          "cannot register it")
        elif instance.status != "passing":
            yield Finding("consul-service-health", Status.FAIL, target,
                          f"{instance.status}: {instance.output or 'no output'}",
                          f"the concentrator on {address} fails its health check: "
                          "HAProxy or every radosgw behind it is down")
        else:
            yield Finding("consul-service-health", Status.PASS, target,
                          f"passing ({instance.address})")


def consul_healthy(obs: Observation) -> set[str]:
    view = obs.consul
    assert view is not None
    return {i.address for i in view.instances if i.status == "passing"}


@check("consul-dns-agreement", tags=("dns", "consul"),
       summary="every DNS server answers exactly Consul's passing `s3` set")
def dns_agreement(obs: Observation) -> Iterator[Finding]:
    view = obs.consul
    if view is None or view.error:
        return
    healthy = consul_healthy(obs)
    for a in obs.dns:
        if a.error and not healthy and a.error == "NXDOMAIN":
            yield Finding("consul-dns-agreement", Status.PASS, f"{a.name} @{a.server}",
                          "no passing instance and no answer")
            continue
        if a.error:
            continue  # dns-answer-count reports it
        target = f"{a.name} @{a.server}/{a.transport}"
        got = set(a.addresses)
        if got == healthy:
            yield Finding("consul-dns-agreement", Status.PASS, target,
                          f"matches Consul ({len(got)} passing)")
            continue
        parts = []
        if got - healthy:
            parts.append(f"answers {', '.join(sorted(got - healthy))} that Consul does not "
                         "count as passing")
        if healthy - got:
            parts.append(f"lacks passing {', '.join(sorted(healthy - got))}")
        yield Finding("consul-dns-agreement", Status.FAIL, target, "; ".join(parts),
                      "CoreDNS must forward to Consul (consul mode Corefile, no cache) and "
                      "Consul answer only passing instances (dns_config.only_passing)")
