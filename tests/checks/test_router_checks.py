"""The router checks beyond pass/fail (test_checks.py has those): what they say when all is
well, round robin, a site without routers, a stopped router beside a name that still
answers, and a keyless site."""

from __future__ import annotations

from deploy_kit.verify.model import Observation, RoutingProbe, Status, evaluate
from tests.checks.router_fixtures import NAME, ROUTERS, _router2_stopped
from tests.checks.test_checks import healthy

ROUTER_CHECKS = {"router-dns", "router-health", "routing-sticky"}


def _by_target(obs: Observation, check: str) -> dict[str, tuple[Status, str]]:
    return {f.target: (f.status, f.message) for f in evaluate(obs, {check})}


def test_sticky_names_the_instance_the_other_prompt_and_the_hits() -> None:
    found = _by_target(healthy(), "routing-sticky")
    status, message = found[f"router2 (10.9.2.2) as {NAME}"]
    assert status == Status.PASS
    assert "both landed on gpu2 (prefixaware)" in message
    assert "another fresh prompt landed on gpu3/1" in message
    assert "vLLM prefix-cache hits on gpu2 around the repeat: +288 tokens" in message


def test_round_robin_is_said_not_asked() -> None:
    obs = healthy()
    obs.routing = [RoutingProbe(router=n, address=a, name=NAME, logic="roundrobin")
                   for n, a in ROUTERS.items()]
    found = evaluate(obs, {"routing-sticky"})
    assert [f.status for f in found] == [Status.INFO, Status.INFO]
    assert "round robin does not stick" in found[0].message


def test_a_site_without_routers_skips_saying_so() -> None:
    obs = healthy()
    obs.routers_planned, obs.router_dns, obs.router_fronts, obs.routing = {}, [], [], []
    for f in evaluate(obs, ROUTER_CHECKS):
        assert (f.status, f.message) == (Status.SKIP, "the site has no router group")


def test_a_stopped_router_fails_by_name_while_the_name_answers_the_rest() -> None:
    """Consul dropped router2: the name answers router1 alone, which is right (router-dns
    passes), and router-health fails naming router2; its stickiness is not asked."""
    obs = healthy()
    _router2_stopped(obs)
    obs.routing[1].serving = False
    dns = _by_target(obs, "router-dns")
    assert {s for s, _ in dns.values()} == {Status.PASS}
    assert all(m == "1 A records: router1 10.9.2.1" for _, m in dns.values())
    health = _by_target(obs, "router-health")
    assert health["router1 (10.9.2.1:8200)"][0] == Status.PASS
    assert health["router2 (10.9.2.2:8200)"][0] == Status.FAIL
    sticky = _by_target(obs, "routing-sticky")
    assert sticky[f"router2 (10.9.2.2) as {NAME}"][0] == Status.SKIP


def test_unprobed_routers_are_all_expected_in_dns() -> None:
    """--limit left the routers out: DNS is judged against every planned router."""
    obs = healthy()
    obs.router_fronts, obs.routing = [], []
    obs.outside_limit = {"router": "needs router (router1, router2), outside --limit"}
    assert {f.status for f in evaluate(obs, {"router-dns"})} == {Status.PASS}
    for check in ("router-health", "routing-sticky"):
        (f,) = evaluate(obs, {check})
        assert f.status == Status.SKIP and "outside --limit" in f.message


def test_a_keyless_site_answers_unkeyed_by_choice() -> None:
    obs = healthy()
    obs.router_fronts[0].keyed = False
    obs.router_fronts[0].unkeyed = 200
    obs.router_fronts[0].unkeyed_reached_router = True
    status, message = _by_target(obs, "router-health")["router1 (10.9.2.1:8200)"]
    assert status == Status.PASS and "vllm_api_key_required false" in message


def test_an_unknown_tag_is_named_as_such() -> None:
    obs = healthy()
    obs.routing[0].second = "0123456789ab"
    status, message = _by_target(obs, "routing-sticky")[f"router1 (10.9.2.1) as {NAME}"]
    assert status == Status.FAIL and "an unknown instance (tag 0123456789ab)" in message


def test_doctor_points_router_symptoms_at_the_router_checks() -> None:
    from deploy_kit.verify.doctor import diagnose

    for symptom in ("the repeat lands on a different instance", "llm.example.com refuses",
                    "router returns 503"):
        suggested = {c for _, checks in diagnose(symptom) for c in checks}
        assert {"router-dns", "router-health", "routing-sticky"} <= suggested, symptom
    assert not any("routing-sticky" in checks for _, checks in diagnose("the s3 region"))
