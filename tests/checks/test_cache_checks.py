"""The cache-hit checks beyond pass/fail: masked repeats, hosts that do not serve."""

from __future__ import annotations

from deploy_kit.verify.model import Status, evaluate
from tests.checks.test_checks import healthy


def test_masked_repeat_passes_when_the_other_host_hits() -> None:
    obs = healthy()
    obs.cache[0].second_external, obs.cache[0].second_local = 0, 512
    obs.cache[0].other_host, obs.cache[0].other_external = "gpu2", 512
    [finding] = [f for f in evaluate(obs, {"lmcache-cache-hit"}) if f.target == "gpu1"]
    assert finding.status == Status.PASS and "gpu2, which never saw the prompt, got 512" \
        in finding.message


def test_masked_repeat_without_another_host_warns() -> None:
    obs = healthy()
    obs.cache = obs.cache[:1]
    obs.cache[0].second_external, obs.cache[0].second_local = 0, 512
    [finding] = evaluate(obs, {"lmcache-cache-hit"})
    assert finding.status == Status.WARN and "LMCache not exercised" in finding.message


def test_a_host_that_does_not_serve_is_skipped_not_failed_twice() -> None:
    obs = healthy()
    obs.cache[1].serving, obs.cache[1].error = False, "/health None, /v1/models none"
    findings = evaluate(obs, {"lmcache-cache-hit", "vllm-external-prefix-metrics"})
    gpu2 = [f for f in findings if f.target == "gpu2"]
    assert [f.status for f in gpu2] == [Status.SKIP] and "see vllm-service" in gpu2[0].message
    assert not [f for f in findings if f.status == Status.FAIL]


def test_doctor_sends_degraded_mode_to_the_cache_checks() -> None:
    from deploy_kit.verify.doctor import diagnose

    [(_, checks)] = diagnose("LMCache: No supported cpu connector found, degraded mode")
    assert "lmcache-cache-hit" in checks and "vllm-external-prefix-metrics" in checks
    assert "lmcache-cache-hit" in diagnose("zero hits on the second host")[0][1]
