"""`deploykit verify` against the converged lab: all green, every check that can run
runs, and the serving hosts hold the serving identity. Its faults and the repair converge
are the `faults` session's (tests/lab/faults/test_1_faults_named_then_repaired.py)."""

from __future__ import annotations

import json

import pytest

from tests.lab.conftest import Lab

pytestmark = pytest.mark.lab

LAB3, LAB4 = "10.99.0.13", "10.99.0.14"
CFG = "/etc/deploykit"


def verify(lab: Lab) -> tuple[int, list[dict]]:
    result = lab.deploykit("verify", "--inventory", "lab", "--json", check=False)
    return result.returncode, json.loads(result.stdout)["findings"]


def failing(findings: list[dict]) -> set[tuple[str, str]]:
    return {(f["check"], f["target"]) for f in findings if f["status"] == "fail"}


def test_verify_passes_on_the_converged_lab(converged: Lab) -> None:
    rc, findings = verify(converged)
    assert rc == 0, failing(findings)
    statuses = {f["check"]: f["status"] for f in findings}
    for check in ("dns-answer-count", "s3-concentrator-reachable", "s3-credentials-valid",
                  "s3-roundtrip", "s3-vhost-routing", "ceph-pools", "ceph-rgw-daemons",
                  "lmcache-chunk-aligned", "lmcache-fleet-consistent", "lmcache-s3-settings",
                  "lmcache-remote-url", "vllm-connector-name",
                  "dns-resolver-points-at-coredns", "dns-client-resolution",
                  # the serving identity: objects yes, bucket-level changes refused (403)
                  "s3-serving-least-privilege", "s3-bucket-lifecycle",
                  # one model's identity refused on keys no model owns; no side door
                  "s3-serving-model-isolation", "vllm-no-side-door"):
        assert statuses.get(check) == "pass", (check, statuses.get(check))
    # every instance's public address refuses the unkeyed paths (test_6 probes them itself)
    doors = {f["target"].split(" ", 1)[0]: f for f in findings
             if f["check"] == "vllm-no-side-door"}
    assert set(doors) == {"lab3/0", "lab3/1", "lab4"}, doors
    for target, finding in doors.items():
        assert finding["status"] == "pass", finding
        assert "/invocations 404" in finding["message"], (target, finding)
        assert "/v1/completions 401" in finding["message"], (target, finding)
    # lab3 (two instances) and lab4 serve for real (vLLM on CPU + an LMCache server each):
    # nothing is skipped
    serving = [f for f in findings if f["check"] == "vllm-service"]
    assert {f["target"] for f in serving} >= {"lab3/0", "lab3/1", "lab4"}, serving
    assert all(f["status"] == "pass" for f in serving), serving
    assert not [f for f in findings if f["status"] == "skip"], \
        [f for f in findings if f["status"] == "skip"]
    roundtrips = [f for f in findings if f["check"] == "s3-roundtrip"]
    assert len(roundtrips) == 2  # one per gateway host, through lmcache.s3.lab.test


def test_serving_hosts_hold_the_serving_identity_not_the_owners(converged: Lab) -> None:
    import subprocess

    from tests.lab.conftest import CEPH_CONF

    def access_key(uid: str) -> str:
        info = json.loads(subprocess.run(
            ["radosgw-admin", "--conf", CEPH_CONF, "user", "info", "--uid", uid],
            check=True, capture_output=True, text=True).stdout)
        assert info["display_name"].endswith("[deploykit-site=lab]"), info["display_name"]
        return str(info["keys"][0]["access_key"])

    from deploy_kit.config.s3_identities import serving_uid
    from tests.lab.conftest import lab_model_on_host

    # one identity per model: the lab serves one, so both hosts hold its keys
    owner = access_key("lmcache")
    serving = access_key(serving_uid("lmcache", lab_model_on_host()))
    for address in (LAB3, LAB4):
        profile = converged.ssh(address, f"cat {CFG}/aws/credentials")
        assert serving in profile and owner not in profile, address


