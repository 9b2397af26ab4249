"""The cache-hit checks beyond pass/fail: masked repeats, hosts that do not serve."""

from __future__ import annotations

from typing import TYPE_CHECKING

from deploy_kit.verify.model import Status, evaluate
from tests.checks.test_checks import healthy

if TYPE_CHECKING:
    from deploy_kit.config.site import Host


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


def _serving_host(name: str, **settings: object) -> Host:
    from deploy_kit.config.models import HostConfig
    from deploy_kit.config.site import Host

    config = HostConfig(vllm_accelerator="cuda", lmcache_topology="inprocess").model_copy(
        update=settings)
    return Host(name=name, address=f"10.9.1.{name[-1]}", groups=frozenset({"vllm"}),
                config=config, sources={}, geometry=None)


def test_the_ring_pairs_only_hosts_that_can_read_each_others_chunks() -> None:
    from deploy_kit.verify.probes.remote_probe import ring

    hosts = [_serving_host("gpu1"), _serving_host("gpu2"), _serving_host("gpu3"),
             _serving_host("gpu4", vllm_python_hash_seed=99),  # other hashes: other keys
             _serving_host("gpu5", lmcache_topology="server")]  # other object names
    pairs, alone = ring(hosts)
    assert [(w.name, r.name, t.name if t else None) for w, r, t in pairs] == [
        ("gpu1", "gpu2", "gpu3"), ("gpu2", "gpu3", "gpu1"), ("gpu3", "gpu1", "gpu2")]
    assert sorted(alone) == ["gpu4", "gpu5"]
    local_only, alone = ring([_serving_host("gpu1", lmcache_mode="dram"),
                              _serving_host("gpu2", lmcache_mode="dram")])
    assert local_only == [] and "no remote tier" in alone["gpu1"]
    two, _ = ring(hosts[:2])
    assert [(w.name, r.name, t) for w, r, t in two] == [("gpu1", "gpu2", None),
                                                        ("gpu2", "gpu1", None)]


def test_a_third_host_tells_a_broken_reader_from_a_broken_writer() -> None:
    from deploy_kit.verify.model import RemoteRead

    def miss(second_external: int) -> list[tuple[str, str]]:
        obs = healthy()
        obs.remote = [RemoteRead("gpu1", "gpu2", 517, 512, reader_external=0,
                                 second_reader="gpu3", second_external=second_external)]
        return [(f.target, f.message) for f in evaluate(obs, {"lmcache-remote-tier"})
                if f.status == Status.FAIL]

    [(target, message)] = miss(512)
    assert target == "gpu2" and "gpu2's reads do not reach S3 (gpu3 got 512" in message
    [(target, message)] = miss(0)
    assert target == "gpu1" and "gpu1's writes do not reach S3 (gpu3 missed" in message


def test_a_host_alone_with_its_model_is_skipped_naming_why() -> None:
    obs = healthy()
    obs.remote, obs.remote_alone = [], {"gpu1": "no other serving host shares its model"}
    [finding] = evaluate(obs, {"lmcache-remote-tier"})
    assert finding.status == Status.SKIP and finding.target == "gpu1"


def test_doctor_sends_hits_lost_after_maintenance_to_the_breaker_checks() -> None:
    from deploy_kit.verify.doctor import diagnose

    for symptom in ("hits stopped after maintenance", "zero hits on other hosts",
                    "S3L2Adapter disabled after 3 consecutive connection failures"):
        checks = diagnose(symptom)[0][1]
        assert checks[:2] == ("lmcache-s3-breaker", "lmcache-remote-tier"), symptom


def test_the_journal_read_keeps_the_breakers_time_and_words() -> None:
    from deploy_kit.verify.probes.serving_probe import parse_s3_log

    text = ("@vllm\n@lmcache-server\n"
            "lmcache-server breaker 1 2026-12-05T08:01:01+0000 lab3 lmcache-server[812]: "
            "\x1b[31m[2026-12-05 08:01:01,002] LMCache ERROR:\x1b[0m S3L2Adapter disabled "
            "after 3 consecutive connection failures\n"
            "lmcache-server connection 3 2026-12-05T08:01:00+0000 lab3 lmcache-server[812]: "
            "S3L2Adapter connection error (3/3): AWS_IO_SOCKET_CONNECTION_REFUSED\n"
            "vllm nonsense 1 x\n")
    events = parse_s3_log(text)
    assert [(e.unit, e.kind, e.count, e.when) for e in events] == [
        ("lmcache-server", "breaker", 1, "2026-12-05T08:01:01+0000"),
        ("lmcache-server", "connection", 3, "2026-12-05T08:01:00+0000")]
    assert events[0].text == ("[2026-12-05 08:01:01,002] LMCache ERROR: S3L2Adapter disabled "
                              "after 3 consecutive connection failures")
    assert parse_s3_log("@vllm\n") == []


def test_doctor_sends_an_instance_miss_to_the_instance_checks() -> None:
    from deploy_kit.verify.doctor import diagnose

    suggested = [c for _, checks in diagnose("vllm-1 misses what the other instance computed")
                 for c in checks]
    assert {"lmcache-instance-hit", "accelerator-count"} <= set(suggested)
    assert not diagnose("the s3 region is wrong")[0][1].count("lmcache-instance-hit")


def test_sites_without_instances_or_device_counts_say_so_and_skip_nothing() -> None:
    """One vLLM per host and no device count: both instance checks inform, neither skips
    (verify on such a site must still end with nothing skipped)."""
    obs = healthy()
    obs.cache = obs.cache[:2]  # gpu1, gpu2: one instance each
    for host in obs.serving:
        host.plan.accelerator_count = None
    found = evaluate(obs, {"lmcache-instance-hit", "accelerator-count"})
    assert [(f.check, f.status, f.target) for f in found] == [
        ("lmcache-instance-hit", Status.INFO, "site"), ("accelerator-count", Status.INFO, "site")]
