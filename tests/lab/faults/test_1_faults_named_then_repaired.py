"""Injected faults, each caught by the right check naming the host or address, then green
again after one repair `up`, which is also the rolling-restart proof: the faults touch both
serving hosts' LMCache and vLLM files, so the repair restarts both, one at a time, and a
poller sees one host answering at every poll."""

from __future__ import annotations

import json

import pytest

from tests.lab.conftest import Lab
from tests.lab.vllm_http import assert_rolled, poll_health_during

pytestmark = pytest.mark.lab

LAB2, LAB3, LAB4 = "10.99.0.12", "10.99.0.13", "10.99.0.14"
CFG = "/etc/deploykit"
SERVER_UNIT = "/etc/systemd/system/lmcache-server.service"


def verify(lab: Lab) -> tuple[int, list[dict]]:
    result = lab.deploykit("verify", "--inventory", "lab", "--json", check=False)
    return result.returncode, json.loads(result.stdout)["findings"]


def failing(findings: list[dict]) -> set[tuple[str, str]]:
    return {(f["check"], f["target"]) for f in findings if f["status"] == "fail"}


def has(findings: list[dict], check: str, target_prefix: str) -> bool:
    return any(c == check and t.startswith(target_prefix) for c, t in failing(findings))


def test_stopped_concentrator_is_named(converged: Lab) -> None:
    converged.ssh(LAB2, "systemctl stop haproxy && sleep 3")  # > consul_check_interval
    try:
        rc, findings = verify(converged)
    finally:
        converged.ssh(LAB2, "systemctl start haproxy")
    assert rc == 6
    assert has(findings, "s3-concentrator-reachable", LAB2)
    # consul mode: the failed health check took it out of DNS, and Consul's view names it
    assert has(findings, "consul-service-health", "s3@lab2")
    assert not any(c == "dns-answer-count" for c, _ in failing(findings))


def test_config_and_dns_faults_are_each_named_then_repaired(converged: Lab) -> None:
    converged.ssh(LAB3, f"sed -i 's/^aws_secret_access_key = .*/aws_secret_access_key = "
                  f"WRONGWRONGWRONG/' {CFG}/aws/credentials")
    # the lab serves with lmcache_topology server: LMCache's settings live in its unit
    converged.ssh(LAB3, f"sed -i 's/--chunk-size 256/--chunk-size 250/' {SERVER_UNIT}")
    converged.ssh(LAB4, f"sed -i 's/^PYTHONHASHSEED=.*/PYTHONHASHSEED=68/' {CFG}/vllm.env")
    converged.ssh(LAB4, f"sed -i 's/\"s3_region\":\"default\",//' {SERVER_UNIT}")
    # lab2's s3 health check pointed at a closed port: Consul (and so every DNS server)
    # loses 10.99.0.12. (Renaming the registration no longer works under the default ACLs:
    # the service token may write `s3` only, so the catalog keeps the old entry.) The
    # reload is systemd's SIGHUP: the consul CLI would need a token.
    converged.ssh(LAB2, "sed -i 's#:[0-9]*/health#:9/health#' /etc/consul.d/s3-service.json "
                  "&& systemctl reload consul && sleep 4")
    rc, findings = verify(converged)
    assert rc == 6
    assert has(findings, "s3-credentials-valid", "lab3")
    assert any(f["check"] == "s3-credentials-valid" and "wrong keys" in f["hint"]
               for f in findings)
    assert has(findings, "lmcache-chunk-aligned", "lab3")
    assert has(findings, "lmcache-fleet-consistent", "lab4")
    assert has(findings, "lmcache-s3-settings", "lab4")
    assert has(findings, "dns-answer-count", "s3.lab.test @10.99.0.11/udp")
    assert has(findings, "dns-answer-count", "lmcache.s3.lab.test @10.99.0.12/tcp")
    assert any(f["check"] == "dns-answer-count" and f"missing {LAB2}" in f["message"]
               for f in findings)
    assert has(findings, "consul-service-health", "s3@lab2")
    # repair: one converge restores every file (and restarts CoreDNS), verify is green
    polls, summary = poll_health_during(converged.converge)
    assert summary["changed"] > 0 and not summary["failed"]
    rc, findings = verify(converged)
    assert rc == 0, failing(findings)
    assert_rolled(polls)  # each serving host restarted, never both at once
