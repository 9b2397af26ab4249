"""The cache probe and the TTFT protocol against a real vLLM (CPU) + LMCache server on
loopback (see loopback_serving.py). Skipped where none answers, as on CI."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from deploy_kit.bench import ttft, ttft_report
from deploy_kit.transport import openai as oa
from deploy_kit.verify.model import Observation, Status, evaluate
from deploy_kit.verify.probes import cache_probe
from tests.integration.loopback_serving import LoopbackTier, fake_host, serving, target


@pytest.fixture(scope="module")
def seen() -> oa.Served:
    found = serving()
    if found is None:
        pytest.skip("no vLLM answers on DEPLOYKIT_LOOPBACK_VLLM (default 127.0.0.1:6800)")
    return found


def test_repeat_of_a_fresh_prompt_hits_lmcache(seen: oa.Served) -> None:
    import deploy_kit.verify.checks  # noqa: F401

    [probe] = cache_probe.probe([fake_host()])  # type: ignore[list-item]
    assert probe.serving and probe.error is None, probe
    assert probe.first_external == 0 and probe.second_external == probe.expected_hit_tokens
    assert probe.second_ttft_s is not None and probe.first_ttft_s is not None
    obs = Observation(fqdn="", bucket="", region="", rgw_addresses=[], dns_servers=[],
                      expected_pools=[], expected_rgw_daemons=0, expected_lifecycle={},
                      pinned={}, cache=[probe])
    findings = evaluate(obs, {"lmcache-cache-hit", "vllm-external-prefix-metrics"})
    assert [f.status for f in findings] == [Status.PASS, Status.PASS], findings


@pytest.mark.skipif(not os.environ.get("DEPLOYKIT_LOOPBACK_DIR"),
                    reason="restarting the loopback vLLM needs DEPLOYKIT_LOOPBACK_DIR")
def test_ttft_protocol_on_loopback(seen: oa.Served, tmp_path: Path) -> None:
    """One length, one host: cold, DRAM hit, restart both processes, remote (fs L2) hit,
    control; the length's L2 files are purged afterwards."""
    tier = LoopbackTier(Path(os.environ["DEPLOYKIT_LOOPBACK_DIR"]))
    before = tier.objects()
    results, purged, notes = ttft.run_protocol(
        target(seen), None, [1024], 1, tier, max_tokens=8, token_ids=oa.BYTE_TOKENS,
        run_id=f"pytest-{os.getpid()}", ready_timeout=600)
    by = {r["case"]: r for r in results}
    assert set(by) == set(ttft_report.CASES) - {"remote_hit_other_host"}
    assert by["cold"]["hit_tokens"] == 0 and by["dram_only_control"]["hit_tokens"] == 0
    assert by["dram_hit"]["hit_tokens"] == 1023 and by["remote_hit_restart"]["hit_tokens"] == 1023
    assert by["remote_hit_restart"]["ttft_s"] < by["cold"]["ttft_s"]
    assert purged[1024] > 0 and tier.objects() <= before and notes == []
    doc = ttft.write(ttft_report.document(
        site="loopback", run_id="t", started="", model=seen.model or "", hosts={"a": "loopback",
        "b": None}, lengths=[1024], repeats=1, max_tokens=8, token_ids=oa.BYTE_TOKENS,
        manifest={}, results=results, purged=purged, notes=notes,
        skipped_cases={"remote_hit_other_host": "one host"}), tmp_path)
    assert ttft_report.problems(doc) == [] and (tmp_path / "ttft.png").stat().st_size > 0
