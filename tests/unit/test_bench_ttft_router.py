"""bench ttft --via-router's pure parts: the protocol's order of cases and who answers each
(fake instances and a fake router), the stickiness and ratio it reports, the document's
schema, the table and the chart; and that the protocol without the flag is unchanged."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from deploy_kit.bench import ttft, ttft_report, ttft_router
from deploy_kit.bench.ttft import Target
from deploy_kit.render.serving_front import instance_tag

NAMES = ("gpu1/0", "gpu1/1", "gpu2/0")
INSTANCES = {instance_tag(n): Target(n, "10.0.1.1", 8000 + i, "m", "k")
             for i, n in enumerate(NAMES)}
ROUTER = Target("router1", "10.0.2.1", 8200, "m", "k", host_header="llm.t.test")


class FakeSite:
    """Instances that hold what they served (a repeat is a hit there), and a router that
    sends a prompt where it went before (`sticky`) or to the next instance."""

    def __init__(self, sticky: bool = True) -> None:
        self.sticky = sticky
        self.held: dict[str, set[str]] = {t: set() for t in INSTANCES}
        self.placed: dict[str, str] = {}
        self.turn = 0
        self.sent: list[tuple[str, str]] = []

    def measure(self, sent_to: Target, instances: dict[str, Target], ids: list[int],
                max_tokens: int) -> dict[str, Any]:
        key = str(ids[:8])
        if sent_to.host_header is not None:
            if self.sticky and key in self.placed:
                tag = self.placed[key]
            else:
                tag = sorted(INSTANCES)[self.turn % len(INSTANCES)]
                self.turn += 1
            self.placed.setdefault(key, tag)
            overhead = 0.02
        else:
            tag, overhead = instance_tag(sent_to.name), 0.0
        hit = key in self.held[tag]
        self.held[tag].add(key)
        self.sent.append((sent_to.name, INSTANCES[tag].name))
        return {"host": INSTANCES[tag].name, "instance": tag,
                "via": "router" if sent_to.host_header else "direct",
                "ttft_s": (0.1 if hit else 1.0) + overhead, "tpot_s": 0.01, "total_s": 1.2,
                "prompt_tokens": len(ids), "completion_tokens": max_tokens,
                "hit_tokens": 0, "local_hit_tokens": len(ids) - 1 if hit else 0,
                "error": None}


def _run(monkeypatch: pytest.MonkeyPatch, site: FakeSite, repeats: int = 2
         ) -> tuple[list[dict[str, Any]], list[str]]:
    monkeypatch.setattr(ttft_router, "measure", site.measure)
    picks = iter(sorted(INSTANCES) * 10)
    return ttft_router.run_protocol(ROUTER, INSTANCES, [1024, 4096], repeats, max_tokens=4,
                                    token_ids=(3, 259), run_id="t",
                                    pick=lambda tags: next(picks))


def test_the_protocol_sends_each_case_where_it_belongs(monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    site = FakeSite()
    results, notes = _run(monkeypatch, site)
    assert notes == [] and len(results) == 2 * 2 * 5
    first = results[:5]
    assert [r["case"] for r in first] == list(ttft_report.ROUTER_CASES)
    # the router chose gpu1/0 twice; the direct pair went to that instance; the random
    # repeat went to the first pick
    routed = INSTANCES[sorted(INSTANCES)[0]].name
    assert site.sent[:5] == [("router1", routed), ("router1", routed), (routed, routed),
                             (routed, routed), (routed, routed)]
    repeat, direct = first[1], first[3]
    assert repeat["same_instance"] is True and repeat["via"] == "router"
    assert repeat["vs_direct_repeat"] == pytest.approx(0.12 / 0.1)
    assert direct["instance"] == repeat["instance"] and direct["via"] == "direct"
    assert first[4]["holder"] == (first[4]["instance"] == repeat["instance"])


def test_a_router_that_moves_the_repeat_is_reported_and_no_ratio_is_invented(
        monkeypatch: pytest.MonkeyPatch) -> None:
    results, _ = _run(monkeypatch, FakeSite(sticky=False), repeats=1)
    repeats = [r for r in results if r["case"] == "router_repeat"]
    assert [r["same_instance"] for r in repeats] == [False, False]
    # the direct pair went to the repeat's instance: the ratio compares one instance
    assert all(r["vs_direct_repeat"] is not None for r in repeats)
    summary = ttft_report.routing_summary(results)
    assert [s["same_instance"] for s in summary] == [0, 0]


def test_the_ratio_needs_one_instance() -> None:
    row = {"instance": "a", "ttft_s": 0.2}
    assert ttft_router.ratio(row, {"instance": "a", "ttft_s": 0.1}) == pytest.approx(2.0)
    assert ttft_router.ratio(row, {"instance": "b", "ttft_s": 0.1}) is None
    assert ttft_router.ratio({"instance": None, "ttft_s": 0.2}, row) is None
    assert ttft_router.ratio(row, {"instance": "a", "ttft_s": None}) is None


def _doc(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    results, notes = _run(monkeypatch, FakeSite())
    return ttft_report.router_document(
        site="lab", run_id="r", started="2026-12-10T12:00:00+00:00", model="m",
        router={"router": "router1", "name": "llm.t.test"}, instances=list(NAMES),
        lengths=[1024, 4096], repeats=2, max_tokens=4, token_ids=(3, 259),
        manifest={}, results=results, notes=notes)


def test_the_document_has_the_protocols_form_and_its_own_schema(
        monkeypatch: pytest.MonkeyPatch) -> None:
    doc = _doc(monkeypatch)
    assert ttft_report.problems(doc) == []
    assert doc["schema"] == ttft_report.ROUTER_SCHEMA
    assert [s["case"] for s in doc["summary"][:5]] == list(ttft_report.ROUTER_CASES)
    cold = next(s for s in doc["summary"] if s["case"] == "router_repeat")
    assert cold["ttft_vs_cold"] == pytest.approx(0.12 / 1.02)
    (short, _) = doc["routing"]
    assert (short["same_instance"], short["n"]) == (2, 2)
    assert short["router_vs_direct_repeat"] == pytest.approx(1.2)
    assert short["within_target"] is True and short["target"] == 1.5
    broken = copy.deepcopy(doc)
    broken["results"][0]["case"] = "cold"  # the protocol's case, not this form's
    del broken["results"][1]["via"]
    found = ttft_report.problems(broken)
    assert "results[0].case 'cold'" in found and "results[1] missing via" in found


def test_the_table_and_the_chart_state_the_ratio_and_the_stickiness(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    doc = _doc(monkeypatch)
    console = Console(width=400, record=True)
    console.print(ttft_report.table(doc))
    text = console.export_text()
    assert "router1 as llm.t.test" in text and "(median of 2 [min-max])" in text
    assert "router / direct repeat (goal ≤ 1.5)" in text
    assert "2 of 2" in text and "1.20" in text
    fig = ttft_report.figure(doc)
    ax = fig.axes[0]
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend == [ttft_report.ROUTER_LABELS[c] for c in ttft_report.ROUTER_CASES]
    assert "through the router vs direct" in ax.get_title()
    assert [t.get_text() for t in ax.texts] == [
        "router repeat / direct repeat at 4,096 tokens: 1.20 (goal ≤ 1.5); the repeat went "
        "back to the cold request's instance 2 of 2 times"]
    data = ttft_report.plot(doc, tmp_path / "ttft.png").read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_protocol_document_is_unchanged_without_the_flag() -> None:
    """No router key in the protocol's rows, schema or summary."""
    from tests.unit.test_bench_ttft_pure import _doc as protocol_doc

    doc = protocol_doc()
    assert doc["schema"] == "deploykit-bench-ttft/1" and "routing" not in doc
    assert set(doc["results"][0]) == set(ttft_report.ROW_KEYS) | {"total_s"}
    assert ttft_report.cases_of(doc) == ttft_report.CASES
    assert ttft.Target("a", "h", 1, "m").host_header is None
