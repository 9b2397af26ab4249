"""Where a repeated prefix is answered, with and without the routers: an estimate (pure).

A prefix is held where it was first served: in that instance's HBM (vLLM's prefix cache) or
its LMCache DRAM (L1), its "holder". A repeat answered elsewhere is a hit in the LMCache
server's L1 when it lands on another instance of the holder's host (server topology: the
host's instances share one L1), else a remote (S3) hit when the prompt is at least the
break-even length (plan/breakeven.py) and the site has a remote tier, else a recompute.

Assumptions, stated with the figures wherever they are shown:
- the holder still keeps the prefix when the repeat comes (no eviction);
- without a router, requests spread evenly over the N instances behind the routers: a
  repeat lands on the holder with probability 1/N;
- with prefixaware, kvaware or session routing the repeat lands on the holder. This is an
  upper bound: vllm-router's cache-aware logic sends a request to the least-loaded instance
  when the loads differ by more than its balance thresholds, and the share it moves is not
  modelled. Session routing needs the repeat to carry the same x-session-id (or `user`);
- prefixaware: each router keeps its own prefix tree, so a repeat that reaches another
  router than the first (each lookup of the routers' name picks one) does no better than
  no router. Its share is shown apart (`other_router`); kvaware (every router reads every
  instance's KV events) and session (one hash on every router) do not have this problem;
- roundrobin does not stick: as without a router.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from deploy_kit.config.instances import instance_count
from deploy_kit.config.site import Host
from deploy_kit.plan.breakeven import MAX_TOKENS, ServingGroupPlan

STICKY = ("prefixaware", "kvaware", "session")
REMOTE_MODES = ("s3", "nixl")


@dataclass(frozen=True)
class Shares:
    """Fractions of repeats answered each way (they sum to 1)."""

    holder: float  # the holder's HBM or LMCache DRAM
    host_l1: float  # the LMCache server's L1 on the holder's host (another instance there)
    remote: float  # the remote tier (S3)
    recompute: float


@dataclass
class RoutingRow:
    context_tokens: int
    without: Shares
    routed: Shares
    other_router: Shares | None = None  # prefixaware, 2+ routers: a repeat at another router


@dataclass
class RoutingEstimate:
    model: str
    device: str
    logic: str
    routers: int
    instances: int  # N: every instance behind the routers
    hosts: int
    breakeven_tokens: int | None  # from the serving group; None: no FLOP model
    remote_tier: bool
    rows: list[RoutingRow] = field(default_factory=list)
    assumptions: list[str] = field(default_factory=list)


def _split(rest: float, tokens: int, breakeven: int | None, remote_tier: bool
           ) -> tuple[float, float]:
    """(remote, recompute) of the repeats that miss the holder and its host's L1. Without a
    FLOP model the break-even is unknown: counted remote (LMCache reads every hit then)."""
    if not remote_tier or breakeven == MAX_TOKENS or \
            (breakeven is not None and tokens < breakeven):
        return 0.0, rest
    return rest, 0.0


def without_router(counts: list[tuple[int, bool]], tokens: int, breakeven: int | None,
                   remote_tier: bool) -> Shares:
    """`counts`: per serving host, its instances and whether they share an LMCache server.
    The holder is any instance with the same chance; so is the repeat's instance."""
    n = sum(k for k, _ in counts)
    holder = 1 / n
    host_l1 = sum(k * (k - 1) for k, shared in counts if shared) / n**2
    remote, recompute = _split(1 - holder - host_l1, tokens, breakeven, remote_tier)
    return Shares(holder, host_l1, remote, recompute)


def at_another_router(without: Shares, routers: int) -> Shares:
    """prefixaware: a repeat at the router that served the prefix (1/routers) lands on the
    holder; at another it does no better than no router."""
    first = 1 / routers
    rest = 1 - first
    return Shares(first + rest * without.holder, rest * without.host_l1,
                  rest * without.remote, rest * without.recompute)


def estimate(group: ServingGroupPlan, serving: list[Host], routers: list[Host]
             ) -> RoutingEstimate | None:
    """One serving group's estimate; None where the site has no routers."""
    if not routers or not serving:
        return None
    logic = routers[0].config.router_routing_logic
    counts = [(instance_count(h.config), h.config.lmcache_server) for h in serving]
    remote_tier = any(h.config.lmcache_mode in REMOTE_MODES for h in serving
                      if h.name in group.hosts)
    found = RoutingEstimate(model=group.model, device=group.device, logic=logic,
                            routers=len(routers), instances=sum(k for k, _ in counts),
                            hosts=len(serving), breakeven_tokens=group.breakeven_tokens,
                            remote_tier=remote_tier)
    for row in group.rows:
        base = without_router(counts, row.context_tokens, group.breakeven_tokens, remote_tier)
        routed = Shares(1.0, 0.0, 0.0, 0.0) if logic in STICKY else base
        found.rows.append(RoutingRow(
            row.context_tokens, base, routed,
            at_another_router(base, len(routers))
            if logic == "prefixaware" and len(routers) > 1 else None))
    found.assumptions = assumptions(found)
    return found


def assumptions(e: RoutingEstimate) -> list[str]:
    out = ["the holder (the instance that served the prefix first) still keeps it when the "
           "repeat comes: no eviction",
           f"without a router, requests spread evenly over the {e.instances} instances: a "
           f"repeat reaches the holder with probability 1/{e.instances}"]
    if not e.remote_tier:
        out.append("no remote tier (lmcache_mode dram or disk): a repeat away from the holder "
                   "and its host's L1 is recomputed")
    elif e.breakeven_tokens is None:
        out.append("no FLOP model for this geometry: every miss counted as an S3 hit (LMCache "
                   "reads every hit)")
    elif e.breakeven_tokens == MAX_TOKENS:
        out.append("a remote hit never beats recompute at deploykit_storage_gbps: every miss "
                   "is recomputed")
    else:
        out.append("a miss is an S3 hit from the serving group's break-even length (at "
                   "deploykit_storage_gbps), a recompute below")
    if e.logic in STICKY:
        out.append(f"with {e.logic} the repeat reaches the holder: an upper bound (vllm-router "
                   "sends a request to the least-loaded instance when the loads differ by "
                   "more than its balance thresholds; that share is not modelled)")
    if e.logic == "session":
        out.append("session: the repeat carries the same x-session-id (or `user`)")
    if e.logic == "prefixaware" and e.routers > 1:
        out.append(f"prefixaware: each of the {e.routers} routers keeps its own prefix tree; "
                   "a repeat at another router than the first does no better than no router "
                   "(shown apart; a client that keeps its connection keeps its router)")
    if e.logic == "roundrobin":
        out.append("roundrobin does not stick: as without a router")
    return out
