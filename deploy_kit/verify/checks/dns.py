"""DNS: the S3 name and <bucket>.<fqdn> answer with every healthy concentrator."""

from __future__ import annotations

from collections.abc import Iterator

from deploy_kit.verify.model import Finding, Observation, Status, check

MAX_TTL = 30


def healthy_addresses(obs: Observation) -> set[str]:
    """Concentrators that answer: what DNS should return. All of them when not probed."""
    if not obs.concentrators:
        return set(obs.rgw_addresses)
    return {c.address for c in obs.concentrators if c.health_status == 200}


@check("dns-answer-count", tags=("dns",),
       summary="each DNS server answers both names with one A record per healthy concentrator")
def answer_count(obs: Observation) -> Iterator[Finding]:
    expected = healthy_addresses(obs)
    for a in obs.dns:
        target = f"{a.name} @{a.server}/{a.transport}"
        if a.error:
            hint = ("CoreDNS answers only coredns_allowed_networks: add this controller's "
                    "address there" if a.error == "REFUSED" else
                    "is CoreDNS running on that server, and port 53 open over UDP and TCP?")
            yield Finding("dns-answer-count", Status.FAIL, target, f"no answer: {a.error}", hint)
            continue
        got = set(a.addresses)
        if got == expected:
            yield Finding("dns-answer-count", Status.PASS, target,
                          f"{len(got)} A records: {', '.join(sorted(got))}")
            continue
        parts = [f"{len(got)} A record(s) (expected {len(expected)})"]
        if expected - got:
            parts.append(f"missing {', '.join(sorted(expected - got))}")
        if got - expected:
            parts.append(f"returns {', '.join(sorted(got - expected))} whose concentrator is down"
                         if got - expected <= set(obs.rgw_addresses) else
                         f"unknown {', '.join(sorted(got - expected))}")
        yield Finding("dns-answer-count", Status.FAIL, target, "; ".join(parts),
                      "a missing record sends all S3 traffic to fewer gateways: check the "
                      "Consul `s3` service health (consul mode) or the zone (static mode)")


@check("dns-answer-name", tags=("dns",), summary="answers carry the name that was asked")
def answer_name(obs: Observation) -> Iterator[Finding]:
    for a in obs.dns:
        if a.error or not a.owner_names:
            continue
        target = f"{a.name} @{a.server}/{a.transport}"
        wrong = sorted({n for n in a.owner_names if n.rstrip(".") != a.name.rstrip(".")})
        if wrong:
            yield Finding("dns-answer-name", Status.FAIL, target,
                          f"answer named {', '.join(wrong)}",
                          "the CoreDNS rewrite must rewrite the answer name back (answer auto)")
        else:
            yield Finding("dns-answer-name", Status.PASS, target, "answer name matches")


@check("dns-ttl-low", tags=("dns",), severity="warning",
       summary=f"TTL at most {MAX_TTL} s so a dead concentrator leaves clients quickly")
def ttl_low(obs: Observation) -> Iterator[Finding]:
    for a in obs.dns:
        if a.error or a.ttl is None:
            continue
        target = f"{a.name} @{a.server}/{a.transport}"
        if a.ttl > MAX_TTL:
            yield Finding("dns-ttl-low", Status.FAIL, target, f"TTL {a.ttl} s",
                          "lower deploykit_dns_ttl (Consul service_ttl / zone TTL)")
        else:
            yield Finding("dns-ttl-low", Status.PASS, target, f"TTL {a.ttl} s")


@check("dns-resolver-points-at-coredns", tags=("dns", "vllm"),
       summary="serving hosts resolve through the CoreDNS servers")
def resolver(obs: Observation) -> Iterator[Finding]:
    for host in obs.serving:
        if not host.reachable:
            continue
        if not host.resolv_nameservers:
            yield Finding("dns-resolver-points-at-coredns", Status.FAIL, host.name,
                          "no nameserver in /etc/resolv.conf", "run the resolver role")
        elif not set(host.resolv_nameservers) <= set(obs.dns_servers):
            other = sorted(set(host.resolv_nameservers) - set(obs.dns_servers))
            yield Finding("dns-resolver-points-at-coredns", Status.FAIL, host.name,
                          f"also asks {', '.join(other)}",
                          "a non-CoreDNS resolver may not know the S3 name")
        else:
            yield Finding("dns-resolver-points-at-coredns", Status.PASS, host.name,
                          f"nameservers {', '.join(host.resolv_nameservers)}")


@check("dns-client-resolution", tags=("dns", "vllm"),
       summary="each serving host resolves the S3 names to the healthy concentrators")
def client_resolution(obs: Observation) -> Iterator[Finding]:
    expected = healthy_addresses(obs)
    for host in obs.serving:
        for name, addresses in sorted(host.resolved.items()):
            target = f"{host.name}: {name}"
            if set(addresses) == expected:
                yield Finding("dns-client-resolution", Status.PASS, target,
                              f"{len(addresses)} addresses")
            else:
                yield Finding("dns-client-resolution", Status.FAIL, target,
                              f"resolves to {', '.join(sorted(addresses)) or 'nothing'} "
                              f"(expected {', '.join(sorted(expected))})",
                              "check /etc/resolv.conf and CoreDNS on the DNS hosts")
