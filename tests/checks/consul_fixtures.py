"""Consul's view for the verify check fixtures: a healthy one and the ways it breaks."""

from __future__ import annotations

from collections.abc import Callable

from deploy_kit.verify.model import ConsulMember, ConsulServiceNode, ConsulView, Observation


def consul_view(rgw: list[str]) -> ConsulView:
    nodes = {f"rgw{i}": a for i, a in enumerate(rgw, 1)}
    return ConsulView(
        server="10.9.0.41", service="s3", expected_nodes=sorted([*nodes, "consul1"]),
        rgw_nodes=nodes,
        members=[ConsulMember("consul1", "10.9.0.41", "alive"),
                 *(ConsulMember(n, a, "alive") for n, a in nodes.items())],
        instances=[ConsulServiceNode(n, a, "passing") for n, a in nodes.items()])


def _rgw2_gateway_down(o: Observation) -> None:
    assert o.consul is not None
    o.consul.instances[1].status = "critical"
    o.consul.instances[1].output = "Get http://10.9.0.12:1967/health: connection refused"


def _rgw2_left(o: Observation) -> None:
    assert o.consul is not None
    o.consul.members[2].status = "left"
    del o.consul.instances[1]


def _dns_stale(o: Observation) -> None:
    # Consul already dropped rgw2, the DNS server still answers it
    assert o.consul is not None
    o.consul.instances[1].status = "critical"


def _no_api(o: Observation) -> None:
    assert o.consul is not None
    o.consul.error = "10.9.0.41: URLError: <urlopen error [Errno 111] Connection refused>"


def _dns_lacks(o: Observation) -> None:
    o.dns[1].addresses = o.dns[1].addresses[:1]


CONSUL_CASES: list[tuple[str, Callable[[Observation], None], str, str]] = [
    ("consul-members-alive", _rgw2_left, "rgw2", "member left"),
    ("consul-members-alive", _no_api, "consul", "no answer"),
    ("consul-service-health", _rgw2_gateway_down, "s3@rgw2", "critical: Get http://10.9.0.12"),
    ("consul-service-health", _rgw2_left, "s3@rgw2", "not registered (10.9.0.12"),
    ("consul-dns-agreement", _dns_stale, "s3.t.test @10.9.0.31/udp",
     "answers 10.9.0.12 that Consul does not count as passing"),
    ("consul-dns-agreement", _dns_lacks, "s3.t.test @10.9.0.31/tcp", "lacks passing 10.9.0.12"),
]
