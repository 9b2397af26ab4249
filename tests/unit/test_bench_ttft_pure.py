"""bench ttft's pure parts: prompt ids, TTFT/TPOT from a recorded stream, vLLM's counters,
the protocol's order of cases (fake tier), the JSON schema, the table and the plot."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from deploy_kit.bench import ttft, ttft_report
from deploy_kit.transport import openai as oa

# vLLM 0.32.0 (CPU) answering a 6-token prompt, max_tokens 3, recorded with curl -N
_CHUNK = '{"id":"cmpl-a6","object":"text_completion","choices":[%s]%s}'
_CHOICE = '{"index":0,"text":"<|reserved_%d|>","finish_reason":%s}'
STREAM = "\n\n".join(["data: " + _CHUNK % (_CHOICE % (333, "null"), ""),
                       "data: " + _CHUNK % (_CHOICE % (333, "null"), ""),
                       "data: " + _CHUNK % (_CHOICE % (472, '"length"'), ""),
                       "data: " + _CHUNK % ("", ',"usage":{"prompt_tokens":6,'
                                                '"total_tokens":9,"completion_tokens":3}'),
                       "data: [DONE]", ""]).encode()

METRICS = """# HELP vllm:external_prefix_cache_hits_total External prefix cache hits
# TYPE vllm:external_prefix_cache_hits_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="m"} 0.0
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 0.0
vllm:external_prefix_cache_queries_total{engine="0",model_name="m"} 12288.0
vllm:external_prefix_cache_queries_created{engine="0",model_name="m"} 1.796298657402773e+09
vllm:external_prefix_cache_hits_total{engine="0",model_name="m"} 6142.0
vllm:prompt_tokens_by_source_total{engine="0",model_name="m",source="local_compute"} 6146.0
vllm:prompt_tokens_by_source_total{engine="0",model_name="m",source="external_kv_transfer"} 6142.0
"""


def test_prompt_ids_are_reproducible_in_range_and_fresh_per_seed() -> None:
    one = oa.prompt_ids(4096, "run-4096-0")
    assert one == oa.prompt_ids(4096, "run-4096-0") and len(one) == 4096
    assert min(one) >= 3 and max(one) <= 258
    other = oa.prompt_ids(4096, "run-4096-1")
    assert all(one[i:i + 256] != other[i:i + 256] for i in range(0, 4096, 256))
    assert oa.token_range("cpu") == (3, 259) and oa.token_range("cuda") == (1000, 31000)


def test_ttft_and_tpot_from_a_recorded_stream() -> None:
    times = [0.50, 0.60, 0.70, 0.71, 0.72]
    events = [(t, d) for t, d in zip(times, (oa.sse_data(line) for line in STREAM.splitlines()
                                             if oa.sse_data(line) is not None), strict=False)]
    assert len(events) == 4  # [DONE] and blank lines dropped
    timed = oa.timing(events, total_s=0.72)
    assert timed.ttft_s == 0.50  # the usage chunk (choices: []) is not a token
    assert timed.completion_tokens == 3 and timed.prompt_tokens == 6
    assert timed.tpot_s == pytest.approx((0.70 - 0.50) / 2)
    assert oa.timing([(0.1, {"choices": []})]).error == "the stream carried no choice"


def test_metrics_parsed_and_deltas() -> None:
    before = oa.parse_metrics(METRICS)
    assert before[oa.EXTERNAL_HITS] == 6142 and before[oa.EXTERNAL_QUERIES] == 12288
    assert before["vllm:prompt_tokens_by_source_total{source=external_kv_transfer}"] == 6142
    assert "vllm:external_prefix_cache_queries_created" not in before
    after = dict(before, **{oa.EXTERNAL_HITS: 6142 + 4095, oa.EXTERNAL_QUERIES: 12288 + 4096})
    hits = oa.delta(before, after)
    assert hits is not None and (hits.external, hits.local, hits.queried) == (4095, 0, 4096)
    assert oa.delta(before, {}) is None and oa.delta(None, after) is None


def test_default_lengths_per_accelerator_capped_by_max_model_len() -> None:
    assert ttft.default_lengths("cpu", 16384, 16) == [1024, 2048, 4096, 8192]
    assert ttft.default_lengths("cpu", 8192, 16) == [1024, 2048, 4096]
    assert ttft.default_lengths("cuda", None, 16)[-1] == 131072
    assert ttft.default_lengths("cuda", 40960, 16) == [4096, 8192, 16384, 32768]


class FakeTier:
    def __init__(self) -> None:
        self.stored: set[str] = set()
        self.events: list[str] = []

    def restart(self, target: ttft.Target) -> None:
        self.events.append(f"restart {target.name}")

    def objects(self) -> set[str]:
        return set(self.stored)

    def purge(self, keys: set[str]) -> int:
        self.events.append(f"purge {len(keys)}")
        self.stored -= keys
        return len(keys)


def test_protocol_order_restart_and_purge(monkeypatch: pytest.MonkeyPatch) -> None:
    tier = FakeTier()
    seen: dict[str, list[int]] = {}

    def fake_measure(target: ttft.Target, ids: list[int], max_tokens: int) -> dict[str, Any]:
        key = str(ids[:8])
        hit = (len(ids) // 256) * 256 if key in seen else 0
        seen.setdefault(key, ids)
        tier.stored |= {f"{key}-{i}" for i in range(len(ids) // 256)}
        tier.events.append(f"request {target.name}")
        return {"host": target.name, "ttft_s": 1.0 if not hit else 0.1, "tpot_s": 0.01,
                "total_s": 1.2, "prompt_tokens": len(ids), "completion_tokens": max_tokens,
                "hit_tokens": hit, "local_hit_tokens": 0, "error": None}

    monkeypatch.setattr(ttft, "measure", fake_measure)
    monkeypatch.setattr(ttft, "wait_ready", lambda target, timeout: 0.0)
    monkeypatch.setattr(ttft, "settle", lambda tier, before, **_: tier.objects() - before)
    a, b = ttft.Target("a", "10.0.0.1", 8000, "m"), ttft.Target("b", "10.0.0.2", 8000, "m")
    results, purged, notes = ttft.run_protocol(
        a, b, [1024, 2048], 2, tier, max_tokens=4, token_ids=(3, 259), run_id="t",
        ready_timeout=1)
    assert len(results) == 2 * 2 * 5 and [r["repeat"] for r in results[:10:5]] == [0, 1]
    # host B reads the remote tier while A is idle, before A's restart; after it A answers
    # one short fresh request (not a row) before the measured one
    assert [r["case"] for r in results[:5]] == ["cold", "dram_hit", "remote_hit_other_host",
                                                 "remote_hit_restart", "dram_only_control"]
    assert [r["host"] for r in results[:5]] == ["a", "a", "b", "a", "b"]
    assert [r["hit_tokens"] for r in results[:5]] == [0, 1024, 1024, 1024, 0]
    assert tier.events[:6] == ["request a", "request a", "request b", "restart a",
                               "request a", "request a"]
    assert tier.events.count("restart a") == 4 and tier.stored == set()
    assert purged == {1024: 16, 2048: 32} and notes == []


def _doc() -> dict[str, Any]:
    results = []
    for length, cold in ((1024, 0.4), (4096, 2.1)):
        for case, ttft_s, hit in (("cold", cold, 0), ("dram_hit", 0.05, length),
                                  ("remote_hit_restart", 0.2, length),
                                  ("remote_hit_other_host", 0.25, length),
                                  ("dram_only_control", cold * 1.1, 0)):
            results.append({"context_tokens": length, "case": case, "repeat": 0,
                            "host": "lab4" if "other" in case or "control" in case else "lab3",
                            "ttft_s": ttft_s, "tpot_s": 0.02, "total_s": ttft_s + 0.3,
                            "hit_tokens": hit, "local_hit_tokens": 0, "prompt_tokens": length,
                            "completion_tokens": 16, "error": None})
    return ttft_report.document(
        site="lab", run_id="r", started="2026-12-03T12:00:00+00:00", model="lab-llama",
        hosts={"a": "lab3", "b": "lab4"}, lengths=[1024, 4096], repeats=1, max_tokens=16,
        token_ids=(3, 259), manifest={"lab3": {"vllm": "0.32.0", "lmcache": "0.5.6"}},
        results=results, purged={1024: 4, 4096: 16}, notes=[], skipped_cases={})


def test_document_matches_the_schema_and_summarises() -> None:
    doc = _doc()
    assert ttft_report.problems(doc) == []
    row = next(s for s in doc["summary"] if s["context_tokens"] == 4096 and
               s["case"] == "remote_hit_other_host")
    assert row["ttft_vs_cold"] == pytest.approx(0.25 / 2.1) and row["hit_tokens"] == 4096
    broken = copy.deepcopy(doc)
    broken["results"][0]["case"] = "warm"
    broken["results"][1]["ttft_s"] = "fast"
    del broken["results"][2]["hit_tokens"]
    found = ttft_report.problems(broken)
    assert "results[0].case 'warm'" in found and "results[1].ttft_s is str" in found
    assert "results[2] missing hit_tokens" in found


def test_table_shows_every_case_and_the_ratio() -> None:
    console = Console(width=220, record=True)
    console.print(ttft_report.table(_doc()))
    text = console.export_text()
    assert "remote_hit_other_host" in text and "4,096" in text and "2.100 s (0 hit)" in text
    assert f"{0.25 / 2.1:.2f}" in text


def test_plot_is_a_labelled_png(tmp_path: Path) -> None:
    doc = _doc()
    fig = ttft_report.figure(doc)
    ax = fig.axes[0]
    assert ax.get_xlabel() == "context length (tokens)"
    assert "time to first token (s" in ax.get_ylabel() and "TTFT" in ax.get_title()
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend[:5] == [ttft_report.LABELS[c] for c in ttft_report.CASES]
    assert ax.get_yscale() == "log"
    # the legend sits beside the axes, clear of every data point
    fig.canvas.draw()
    box = ax.get_legend().get_window_extent()
    assert box.x0 >= ax.get_window_extent().x1
    # the 1K/4K remote hits are faster than cold at both lengths: no crossover in range,
    # the headline names the ratio at the longest one
    assert not any("break-even" in t for t in legend)
    texts = [t.get_text() for t in ax.texts]
    assert texts == [f"remote hit (host B) at 4,096 tokens: {2.1 / 0.25:.1f}x faster than cold"]
    path = ttft_report.plot(doc, tmp_path / "ttft.png")
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


def test_fewer_than_two_serving_hosts_is_a_one_line_error(
        make_inventory: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from deploy_kit.core.errors import HostsUnreachable
    from deploy_kit.ops.site import open_site

    site = open_site(str(make_inventory()))
    answering = {site.group("vllm")[0].address}
    monkeypatch.setattr(oa, "served", lambda address, port, key=None: oa.Served(
        health=200, models=[{"id": "m", "max_model_len": 8192}]) if address in answering
        else oa.Served())
    with pytest.raises(HostsUnreachable) as raised:
        ttft.run(site, "inv", None, 1, tmp_path)
    assert "needs 2 serving hosts" in raised.value.message and "1 of" in raised.value.message
    assert "--allow-single-host" in (raised.value.hint or "")


def test_object_paths_keep_slashes_like_lmcache_s3_adapter() -> None:
    key = "/var/lib/vllm/models/lab-llama@00000000@0@3fa9"
    assert ttft.object_path(key) == "//var/lib/vllm/models/lab-llama%4000000000%400%403fa9"
    assert ttft.object_path("Qwen/Qwen3-8B@0@0@ab") == "/Qwen/Qwen3-8B%400%400%40ab"


def test_the_site_tier_sees_only_this_runs_objects(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a live bucket the protocol lists and purges only its own model's keys written
    since the run began: another model's objects and this model's older ones stay."""
    import datetime as dt

    from deploy_kit.cache import store
    from deploy_kit.cache.keys import StoredObject

    start = dt.datetime(2026, 12, 5, 12, 0, tzinfo=dt.UTC)
    bucket = [StoredObject("m@1@0@ab@bfloat16", 1, start + dt.timedelta(seconds=5)),
              StoredObject("m@1@0@old@bfloat16", 1, start - dt.timedelta(hours=2)),
              StoredObject("other@1@0@cd@bfloat16", 1, start + dt.timedelta(seconds=5)),
              StoredObject("_var_lib_vllm_models_m@1@0@ef@bfloat16", 1, start)]
    asked: list[str] = []

    def listing(_bucket: object, prefix: str = "") -> list[StoredObject]:
        asked.append(prefix)
        return [o for o in bucket if o.key.startswith(prefix)]

    monkeypatch.setattr(store, "list_objects", listing)
    tier = object.__new__(ttft.SiteTier)
    tier.bucket = None  # type: ignore[assignment]
    tier.prefixes, tier.since = ["m@", "_var_lib_vllm_models_m@"], start - dt.timedelta(seconds=60)
    assert tier.objects() == {"m@1@0@ab@bfloat16", "_var_lib_vllm_models_m@1@0@ef@bfloat16"}
    assert "" not in asked  # never the whole bucket


def test_remote_rows_carry_their_storage_floor_and_the_overhead_over_it() -> None:
    """A remote row's floor is its KV bytes at the GET throughput measured
    in the same run; the remote hit is compared with the DRAM hit plus that floor."""
    plain = _doc()
    assert all("storage_floor_s" not in s for s in plain["summary"])  # nothing measured
    doc = copy.deepcopy(plain)
    storage = {"get_gb_per_s": 0.5, "bytes_per_token": 131072, "object_bytes": 2 * 2**20,
               "measured_from": "lab3"}
    doc["summary"] = ttft_report.with_storage_floor(doc["summary"], storage)
    row = next(s for s in doc["summary"] if s["context_tokens"] == 4096 and
               s["case"] == "remote_hit_other_host")
    floor = 4096 * 131072 / 0.5e9
    assert row["storage_floor_s"] == pytest.approx(floor)
    assert row["vs_dram_plus_floor"] == pytest.approx(0.25 / (0.05 + floor))
    assert row["overhead_floors"] == pytest.approx((0.25 - 0.05) / floor)
    cold = next(s for s in doc["summary"] if s["case"] == "cold")
    assert "storage_floor_s" not in cold
    console = Console(width=260, record=True)
    console.print(ttft_report.table(doc))
    text = console.export_text()
    assert f"{floor:.3f} s" in text and "floors; goal 1.5 at 4K" in text


def test_crossover_where_the_remote_hit_starts_to_beat_cold() -> None:
    cold = [(4096, 0.28), (8192, 0.59), (16384, 1.32), (32768, 3.21)]
    remote = [(4096, 0.34), (8192, 0.69), (16384, 1.37), (32768, 2.75)]
    at = ttft_report.crossover(cold, remote)
    assert at is not None and 16384 < at < 32768
    assert ttft_report.crossover(cold, [(n, t / 2) for n, t in cold]) is None  # always faster
    assert ttft_report.crossover(cold, [(n, t * 2) for n, t in cold]) is None  # never


def test_chart_marks_the_crossover_and_rows_carry_the_spread(tmp_path: Path) -> None:
    doc = _doc()
    for row in doc["results"]:  # the other-host hit loses at 1K, wins at 4K
        if row["case"] == "remote_hit_other_host" and row["context_tokens"] == 1024:
            row["ttft_s"] = 0.8
    extra = [dict(r, repeat=1, ttft_s=r["ttft_s"] * 1.2) for r in doc["results"]]
    doc["results"] += extra
    doc["summary"] = ttft_report.summarise(doc["results"])
    row = next(s for s in doc["summary"] if s["case"] == "cold" and s["context_tokens"] == 4096)
    assert row["n"] == 2 and row["ttft_min_s"] == 2.1 and row["ttft_max_s"] == pytest.approx(2.52)
    legend = [t.get_text() for t in ttft_report.figure(doc).axes[0].get_legend().get_texts()]
    marks = [t for t in legend if t.startswith("break-even: remote hit beats cold above ~")]
    assert len(marks) == 1
    console = Console(width=260, record=True)
    console.print(ttft_report.table(doc))
    assert "2.310 s [2.100-2.520]" in console.export_text()
