"""The router group for the verify check fixtures: two routers in front of gpu1 and gpu2, as
the probes see them when all is well, and the ways it breaks."""

from __future__ import annotations

from collections.abc import Callable

from deploy_kit.render.serving_front import instance_tag
from deploy_kit.verify.model import DnsAnswer, Observation, RouterFront, RoutingProbe

ROUTERS = {"router1": "10.9.2.1", "router2": "10.9.2.2"}
NAME = "llm.t.test"
INSTANCES = ("gpu1", "gpu2", "gpu3/0", "gpu3/1")


def front(name: str) -> RouterFront:
    """What the lab's router front answered: /health through to the router, the admin paths
    refused by the front, an unkeyed completion refused before the router."""
    return RouterFront(host=name, address=ROUTERS[name], port=8200, keyed=True, health=200,
                       admin={"/workers": 404, "/add_worker": 404}, unkeyed=401)


def routing(name: str, landed: str = "gpu1", other: str = "gpu2") -> RoutingProbe:
    return RoutingProbe(router=name, address=ROUTERS[name], name=NAME, logic="prefixaware",
                        prompt_tokens=300, first=instance_tag(landed),
                        second=instance_tag(landed), other=instance_tag(other),
                        hits_delta=288)


def add_routers(obs: Observation) -> None:
    obs.router_fqdn = NAME
    obs.routers_planned = dict(ROUTERS)
    obs.instance_tags = {instance_tag(n): n for n in INSTANCES}
    obs.router_dns = [DnsAnswer("10.9.0.31", NAME, t, sorted(ROUTERS.values()), [NAME + "."], 5)
                      for t in ("udp", "tcp")]
    obs.router_fronts = [front(n) for n in ROUTERS]
    obs.routing = [routing("router1"), routing("router2", landed="gpu2", other="gpu3/1")]


def _router2_stopped(o: Observation) -> None:
    """router2's front and router stopped; Consul dropped it, so DNS answers router1 alone."""
    o.router_fronts[1] = RouterFront(host="router2", address=ROUTERS["router2"], port=8200,
                                     keyed=True, errors={
                                         p: "ConnectionRefusedError: [Errno 111] Connection "
                                            "refused" for p in ("/health", "/workers",
                                                                "/add_worker",
                                                                "/v1/completions")})
    for a in o.router_dns:
        a.addresses = [ROUTERS["router1"]]


def _router2_in_dns_while_down(o: Observation) -> None:
    """The static zone (or a stale Consul) still hands out the stopped router2."""
    _router2_stopped(o)
    o.router_dns[0].addresses = sorted(ROUTERS.values())


def _router_behind_front_down(o: Observation) -> None:
    o.router_fronts[0].health = 503


def _admin_open(o: Observation) -> None:
    """A front that passes every path: the router lists its backends to anyone."""
    o.router_fronts[0].admin["/workers"] = 200


def _key_not_checked(o: Observation) -> None:
    """The front let an unkeyed completion through; the instance's front refused it."""
    o.router_fronts[1].unkeyed_reached_router = True


def _moved(o: Observation) -> None:
    o.routing[0].second = instance_tag("gpu3/1")


def _no_header(o: Observation) -> None:
    o.routing[1].first = o.routing[1].second = None


ROUTER_CASES: list[tuple[str, Callable[[Observation], None], str, str]] = [
    ("router-dns", _router2_in_dns_while_down, f"{NAME} @10.9.0.31/udp",
     "returns router2 10.9.2.2 whose front does not answer /health 200"),
    ("router-dns", lambda o: setattr(o.router_dns[1], "addresses", [ROUTERS["router2"]]),
     f"{NAME} @10.9.0.31/tcp", "missing router1 10.9.2.1"),
    ("router-dns", lambda o: setattr(o.router_dns[0], "error", "NXDOMAIN"),
     f"{NAME} @10.9.0.31/udp", "no answer: NXDOMAIN"),
    ("router-health", _router2_stopped, "router2 (10.9.2.2:8200)",
     "the router front does not answer: ConnectionRefusedError"),
    ("router-health", _router_behind_front_down, "router1 (10.9.2.1:8200)", "/health 503"),
    ("router-health", _admin_open, "router1 (10.9.2.1:8200)",
     "GET /workers with the key: 200 (expected 404"),
    ("router-health", _key_not_checked, "router2 (10.9.2.2:8200)",
     "from the router itself (the front let it through)"),
    ("routing-sticky", _moved, f"router1 (10.9.2.1) as {NAME}",
     "the repeat of a fresh 300-token prompt landed on gpu3/1, the first request on gpu1"),
    ("routing-sticky", _no_header, f"router2 (10.9.2.2) as {NAME}",
     "no X-Deploykit-Instance header"),
    ("routing-sticky", lambda o: setattr(o.routing[0], "error", "repeat: HTTP 503"),
     f"router1 (10.9.2.1) as {NAME}", "routing probe: repeat: HTTP 503"),
]
