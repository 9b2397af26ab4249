"""plan's routing estimate: where a repeated prefix is answered with and without the routers
(the shares, the break-even's split, each routing logic, several routers) and that plan
shows it as an estimate with its assumptions, only where the site has routers."""

from __future__ import annotations

import copy

import pytest
from rich.console import Console

from deploy_kit.cli.plan_view import show_plan
from deploy_kit.ops.site import open_site
from deploy_kit.plan.breakeven import MAX_TOKENS
from deploy_kit.plan.plan import Plan, build_plan
from deploy_kit.plan.routing import Shares, at_another_router, without_router
from tests.conftest import BASE_HOSTS, REPO, InventoryFactory


def _total(s: Shares) -> float:
    return s.holder + s.host_l1 + s.remote + s.recompute


def test_without_a_router_the_holder_is_one_in_n_and_siblings_share_a_server_l1() -> None:
    """Two hosts of four instances behind one LMCache server each: 1/8 on the holder, 3/8 on
    a sibling of its host (its L1), the rest split by the break-even."""
    counts = [(4, True), (4, True)]
    long = without_router(counts, 32768, 20000, remote_tier=True)
    assert (long.holder, long.host_l1, long.remote, long.recompute) == (0.125, 0.375, 0.5, 0)
    short = without_router(counts, 4096, 20000, remote_tier=True)
    assert (short.remote, short.recompute) == (0, 0.5)
    # in-process LMCache: siblings share nothing
    assert without_router([(4, False), (4, False)], 32768, 20000, True).host_l1 == 0
    for s in (long, short):
        assert _total(s) == pytest.approx(1)


@pytest.mark.parametrize(("breakeven", "remote_tier", "remote"), [
    (None, True, 0.75),  # no FLOP model: LMCache reads every hit
    (MAX_TOKENS, True, 0.0),  # a remote hit never wins
    (0, True, 0.75),  # every length wins
    (0, False, 0.0),  # lmcache_mode dram: no remote tier
])
def test_the_miss_is_remote_or_recompute_by_the_break_even(breakeven: int | None,
                                                           remote_tier: bool,
                                                           remote: float) -> None:
    s = without_router([(1, False)] * 4, 8192, breakeven, remote_tier)
    assert (s.holder, s.remote, s.recompute) == (0.25, remote, 0.75 - remote)


def test_a_repeat_at_another_router_does_no_better_than_no_router() -> None:
    base = Shares(0.25, 0.0, 0.75, 0.0)
    two = at_another_router(base, 2)
    assert (two.holder, two.remote) == (0.5 + 0.5 * 0.25, 0.5 * 0.75)
    assert _total(two) == pytest.approx(1)


def _routed(make_inventory: InventoryFactory, routers: int, logic: str) -> Plan:
    hosts = copy.deepcopy(BASE_HOSTS)
    if routers:
        hosts["all"]["children"]["router"] = {
            "hosts": {f"r{i}": {"ansible_host": f"10.0.2.{i}"} for i in range(1, routers + 1)},
            "vars": {"router_routing_logic": logic}}
    # one block size and model on both backends (the routers' rule)
    return build_plan(open_site(str(make_inventory(hosts, vllm={
        "vllm_max_model_len": 32768, "vllm_block_size": 16}))))


@pytest.mark.parametrize("logic", ["prefixaware", "kvaware", "session"])
def test_sticky_logics_send_the_repeat_to_the_holder(make_inventory: InventoryFactory,
                                                     logic: str) -> None:
    plan = _routed(make_inventory, 2, logic)
    assert plan.routing
    for e in plan.routing:
        assert (e.instances, e.routers, e.logic) == (2, 2, logic)
        for row in e.rows:
            assert row.without.holder == 0.5 and row.routed == Shares(1.0, 0.0, 0.0, 0.0)
            # only prefixaware keeps a tree per router
            assert (row.other_router is not None) == (logic == "prefixaware")
        assert any("upper bound" in a for a in e.assumptions)


def test_round_robin_is_no_better_than_no_router(make_inventory: InventoryFactory) -> None:
    for e in _routed(make_inventory, 1, "roundrobin").routing:
        assert all(row.routed == row.without for row in e.rows)
        assert "roundrobin does not stick: as without a router" in e.assumptions


def test_no_router_group_no_estimate(make_inventory: InventoryFactory) -> None:
    assert _routed(make_inventory, 0, "prefixaware").routing == []


def test_plan_shows_the_estimate_labelled_with_its_assumptions_once() -> None:
    """One table for every serving group of the example (16 instances of Qwen3-32B, two
    routers), lengths with the same shares folded into one row, each assumption once."""
    plan = build_plan(open_site(str(REPO / "inventory" / "example")))
    console = Console(width=300, record=True)
    show_plan(plan, console)
    text = " ".join(console.export_text().split())  # titles wrap to their table's width
    assert text.count("Routing estimate (not measured)") == 1 and len(plan.routing) == 3
    assert "16 instances on 4 hosts, prefixaware on 2 router(s)" in text
    # the CUDA/ROCm hosts run the LMCache server: a host's instances share its L1
    assert ("│ Qwen/Qwen3-32B on h100 (S3 from 19,601 tokens) │ 4K–16K │ 6% HBM/L1, 14% host "
            "L1, 80% recompute │ 100% HBM/L1 │ 53% HBM/L1, 7% host L1, 40% recompute │") in text
    assert ("│ │ 32K–128K │ 6% HBM/L1, 14% host L1, 80% S3 │ 100% HBM/L1 │ 53% HBM/L1, 7% host "
            "L1, 40% S3 │") in text
    assert "│ Qwen/Qwen3-32B on gaudi3 (S3 from 87,281 tokens) │ 4K–64K │" in text
    assert text.count("assumes the holder (the instance that served the prefix first) still "
                      "keeps it") == 1
    assert "assumes a miss is an S3 hit from the serving group's break-even length" in text


def test_a_share_too_small_to_round_is_shown_not_dropped() -> None:
    from deploy_kit.cli.plan_view import _shares

    assert _shares(Shares(1 / 4000, 0.0, 0.0, 1 - 1 / 4000)) == "<1% HBM/L1, 100% recompute"
