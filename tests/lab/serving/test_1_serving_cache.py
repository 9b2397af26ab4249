"""The serving tier's cache for real in the lab: the cache-hit checks pass on both serving
hosts, and one repeat of `bench ttft`'s protocol at 4K tokens yields a valid JSON document,
the plot, and the hit counts each case must have. The timed ratio (a remote hit on the
other host against a cold prefill) is `make bench`'s: timings are not asserted in tests."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from deploy_kit.bench import ttft_report
from tests.lab.conftest import Lab

pytestmark = pytest.mark.lab


def test_cache_hit_checks_pass_on_every_serving_host(converged: Lab) -> None:
    result = converged.deploykit("verify", "--inventory", "lab", "--json", "--check",
                                 "lmcache-cache-hit", "--check",
                                 "vllm-external-prefix-metrics", check=False)
    findings = json.loads(result.stdout)["findings"]
    passed = {(f["check"], f["target"]) for f in findings if f["status"] == "pass"}
    # every vLLM instance is probed: lab3/0 and lab3/1 where lab3 runs two, lab4
    targets = {f["target"] for f in findings if f["check"] == "lmcache-cache-hit"}
    assert {t.split("/")[0] for t in targets} == {"lab3", "lab4"}, targets
    for target in targets:
        assert ("lmcache-cache-hit", target) in passed, findings
        assert ("vllm-external-prefix-metrics", target) in passed, findings
    assert result.returncode == 0, findings


def test_bench_ttft_protocol_hits_where_it_must(converged: Lab, tmp_path: Path) -> None:
    result = converged.deploykit("bench", "ttft", "--inventory", "lab", "--lengths", "4096",
                                 "--repeats", "1", "--out", str(tmp_path))
    print(result.stdout)  # the table, for the record (pytest -s)
    doc = json.loads((tmp_path / "ttft.json").read_text())
    assert ttft_report.problems(doc) == [], ttft_report.problems(doc)
    assert (tmp_path / "ttft.png").stat().st_size > 10_000
    assert {r["case"] for r in doc["results"]} == set(ttft_report.CASES), result.stdout
    assert len(doc["results"]) == len(ttft_report.CASES)
    for row in doc["results"]:
        cold_case = row["case"] in ("cold", "dram_only_control")
        assert row["hit_tokens"] == (0 if cold_case else 4095), row
        assert row["host"] == ("lab4" if row["case"] in ("remote_hit_other_host",
                                                        "dram_only_control") else "lab3"), row
    assert {s["case"] for s in doc["summary"]} >= {"remote_hit_other_host"}, doc["summary"]
    assert doc["purged_objects"]["4096"] >= 2 * 16 and doc["notes"] == []
    # the storage floor, measured in the same run (not an old figure); the ratio is bench's
    assert doc["storage"]["get_gb_per_s"] > 0 and doc["storage"]["measured_from"] == "lab3"
    other = next(s for s in doc["summary"] if s["case"] == "remote_hit_other_host")
    assert other["storage_floor_s"] > 0 and other["vs_dram_plus_floor"] is not None
    assert "TTFT by context length" in result.stdout + result.stderr  # the table: stderr
