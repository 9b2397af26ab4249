"""The routers (the `router` group): the routers' name answers with every healthy router,
each router's front serves only what it should, and each router sends a prompt it has seen
back to the instance that served it (pure: judges probes/router_probe.py).

A router is healthy when its front answers /health 200 (what its Consul check asks). Each
router keeps its own prefix tree, so stickiness is asked of every router by its address, not
of the name (which picks one router per lookup)."""

from __future__ import annotations

from collections.abc import Iterator

from deploy_kit.verify.model import (
    ROUTER_ADMIN,
    Finding,
    Observation,
    RouterFront,
    RoutingProbe,
    Status,
    check,
)

NO_ROUTERS = "the site has no router group"


def healthy_routers(obs: Observation) -> set[str]:
    """Routers whose front answered /health 200: what the name should answer. Every planned
    router where none was probed (--limit)."""
    if not obs.router_fronts:
        return set(obs.routers_planned.values())
    return {f.address for f in obs.router_fronts if f.health == 200}


@check("router-dns", tags=("router", "dns"),
       summary="each DNS server answers the routers' name with one A record per healthy router")
def router_dns(obs: Observation) -> Iterator[Finding]:
    cid = "router-dns"
    if not obs.routers_planned:
        yield Finding(cid, Status.SKIP, "-", NO_ROUTERS)
        return
    expected = healthy_routers(obs)
    by_address = {a: n for n, a in obs.routers_planned.items()}
    for a in obs.router_dns:
        target = f"{a.name} @{a.server}/{a.transport}"
        if a.error:
            yield Finding(cid, Status.FAIL, target, f"no answer: {a.error}",
                          "CoreDNS answers router_fqdn beside the S3 name: run `deploykit up` "
                          "on the DNS hosts; see dns-answer-count for the server itself")
            continue
        got = set(a.addresses)
        wrong = sorted({n for n in a.owner_names if n.rstrip(".") != a.name.rstrip(".")})
        if got == expected and not wrong:
            yield Finding(cid, Status.PASS, target, f"{len(got)} A records: " + ", ".join(
                f"{by_address.get(x, '?')} {x}" for x in sorted(got)))
            continue
        parts = [f"{len(got)} A record(s) (expected {len(expected)})"]
        if expected - got:
            parts.append("missing " + ", ".join(f"{by_address.get(x, '?')} {x}"
                                                for x in sorted(expected - got)))
        stopped = sorted((got - expected) & set(by_address))
        if stopped:
            parts.append("returns " + ", ".join(f"{by_address[x]} {x}" for x in stopped)
                         + " whose front does not answer /health 200")
        if (got - expected) - set(by_address):
            parts.append(f"unknown {', '.join(sorted((got - expected) - set(by_address)))}")
        if wrong:
            parts.append(f"answer named {', '.join(wrong)}")
        yield Finding(cid, Status.FAIL, target, "; ".join(parts),
                      "consul mode: the router's service (router_service_name) is healthy "
                      "while its front answers /health; static mode: the zone lists every "
                      "router, a stopped one stays in it (see router-health)")


def _front_problems(f: RouterFront) -> list[str]:
    problems = []
    for path in ROUTER_ADMIN:
        status = f.admin.get(path)
        if status != 404:
            problems.append(f"GET {path} with the key: " + (
                f"{status} (expected 404 from the front: the router serves it)"
                if status is not None else f"no answer ({f.errors.get(path, '?')})"))
    if f.keyed and (f.unkeyed != 401 or f.unkeyed_reached_router):
        seen = f"{f.unkeyed}" if f.unkeyed is not None else \
            f"no answer ({f.errors.get('/v1/completions', '?')})"
        problems.append(f"/v1/completions without a key: {seen}"
                        + (" from the router itself (the front let it through)"
                           if f.unkeyed_reached_router else "")
                        + " (expected 401 from the front)")
    return problems


@check("router-health", tags=("router",),
       summary="each router's front answers /health 200, refuses the router's admin paths "
       "(404) and, keyed, a completion without the key (401)")
def router_health(obs: Observation) -> Iterator[Finding]:
    cid = "router-health"
    if not obs.routers_planned:
        yield Finding(cid, Status.SKIP, "-", NO_ROUTERS)
        return
    for f in obs.router_fronts:
        target = f"{f.host} ({f.address}:{f.port})"
        if f.health is None:
            yield Finding(cid, Status.FAIL, target,
                          f"the router front does not answer: {f.errors.get('/health', '?')}",
                          f"`systemctl status vllm-router-front vllm-router` on {f.host}; the "
                          "name still answers through the other routers (router-dns)")
            continue
        if f.health != 200:
            yield Finding(cid, Status.FAIL, target,
                          f"/health {f.health}: the front answers, the router behind it does "
                          "not (or it has no healthy instance)",
                          f"`systemctl status vllm-router` and `journalctl -u vllm-router` on "
                          f"{f.host}; vllm-service says whether the instances serve")
            continue
        problems = _front_problems(f)
        if problems:
            yield Finding(cid, Status.FAIL, target, "; ".join(problems),
                          "run `deploykit up` (the router front refuses every path but /v1, "
                          "/health and /metrics, and checks the key before the router)")
            continue
        admin = ", ".join(f"{p} {f.admin[p]}" for p in ROUTER_ADMIN)
        key = "unkeyed /v1/completions 401 at the front" if f.keyed else \
            f"/v1/completions {f.unkeyed} without a key by the site's choice " \
            "(vllm_api_key_required false)"
        yield Finding(cid, Status.PASS, target, f"/health 200; {admin} with the key; {key}")


def _instance(obs: Observation, tag: str | None) -> str:
    if tag is None:
        return "no instance named (no X-Deploykit-Instance)"
    return obs.instance_tags.get(tag, f"an unknown instance (tag {tag})")


def _hits(p: RoutingProbe, obs: Observation) -> str:
    if p.hits_delta is not None:
        return (f"; vLLM prefix-cache hits on {_instance(obs, p.first)} around the repeat: "
                f"+{p.hits_delta} tokens")
    return f"; prefix-cache hits not read ({p.hits_note})" if p.hits_note else ""


STICKY_HINT = {
    "prefixaware": "vllm-router's cache_aware logic sends a request by load instead when the "
                   "instances' loads differ by more than its balance thresholds "
                   "(--balance-abs-threshold, --balance-rel-threshold in router_extra_args): "
                   "on a busy site run verify again",
    "kvaware": "kvaware learns placement from vLLM's KV events: check vllm_kv_events and that "
               "this router reaches each serving front's vllm_kv_events_port",
    "session": "the session logic hashes x-session-id over the router's instances: a router "
               "whose instance list differs from the others' (an instance down) moves keys",
}


@check("routing-sticky", tags=("router",),
       summary="each router sends a repeat of a fresh prompt to the instance that served it")
def routing_sticky(obs: Observation) -> Iterator[Finding]:
    cid = "routing-sticky"
    if not obs.routers_planned:
        yield Finding(cid, Status.SKIP, "-", NO_ROUTERS)
        return
    for p in obs.routing:
        target = f"{p.router} ({p.address}) as {p.name}"
        if p.logic == "roundrobin":
            yield Finding(cid, Status.INFO, target,
                          "router_routing_logic roundrobin: round robin does not stick (a "
                          "repeat goes to the next instance), so it is not asked")
        elif not p.serving:
            yield Finding(cid, Status.SKIP, target,
                          "skipped: the router front does not answer /health 200; see "
                          "router-health")
        elif p.error:
            yield Finding(cid, Status.FAIL, target, f"routing probe: {p.error}",
                          "router-health and vllm-service say whether the router and the "
                          "instances serve")
        elif p.first is None or p.second is None:
            yield Finding(cid, Status.FAIL, target,
                          "an answer named no instance (no X-Deploykit-Instance header)",
                          "every serving front writes it: run `deploykit up` on the serving "
                          "hosts")
        elif p.first == p.second:
            other = "the same instance" if p.other == p.first else _instance(obs, p.other)
            yield Finding(cid, Status.PASS, target,
                          f"a fresh {p.prompt_tokens}-token prompt and its repeat both landed "
                          f"on {_instance(obs, p.first)} ({p.logic}); another fresh prompt "
                          f"landed on {other}" + _hits(p, obs))
        else:
            yield Finding(cid, Status.FAIL, target,
                          f"the repeat of a fresh {p.prompt_tokens}-token prompt landed on "
                          f"{_instance(obs, p.second)}, the first request on "
                          f"{_instance(obs, p.first)} ({p.logic})",
                          STICKY_HINT.get(p.logic, ""))
