"""The lab in TLS mode from its first converge (`lab up --profile secured`: deploykit_s3_tls
true, port 443, with Consul ACLs and gossip encryption), end to end: deploykit creates the
site CA and issues the concentrator certificates on the controller, HAProxy on lab1/lab2
terminates TLS, the serving hosts trust the CA in their system store, and DNS + S3 + the
LMCache round trip (LMCache 0.5.6's real awscrt client, with the serving host's own CA
bundle) run over https."""

from __future__ import annotations

import json
import subprocess

import pytest

from deploykit_lab.driver_venv import ensure_driver_venv
from tests.conftest import REPO
from tests.lab.conftest import Lab, runs_dirs, s3_round_trip

pytestmark = pytest.mark.lab

CLIENT, RGW = "10.99.0.13", ("10.99.0.11", "10.99.0.12")
TLS_DIR = REPO / "inventory/lab/.deploykit-tls"


@pytest.fixture(scope="module")
def tls_lab(converged: Lab) -> tuple[Lab, dict]:
    return converged, converged.runs[0]


def test_tls_converges_and_a_second_run_changes_nothing(tls_lab: tuple[Lab, dict]) -> None:
    lab, first = tls_lab
    assert first["rc"] == 0 and not first["failed"], first["failed"]
    assert (TLS_DIR / "ca.crt").exists() and (TLS_DIR / "lab1.pem").exists()
    second = lab.converge()
    assert second["changed"] == 0, second["changed_tasks"]  # certificates kept, not reissued


def test_key_material_stays_private(tls_lab: tuple[Lab, dict]) -> None:
    lab, _ = tls_lab
    for address in RGW:
        out = lab.ssh(address, "stat -c '%a %U' /etc/haproxy/deploykit-s3.pem; "
                               "grep -c 'ssl crt /etc/haproxy/deploykit-s3.pem' "
                               "/etc/haproxy/haproxy.cfg")
        assert out.split() == ["600", "root", "1"], out
    run = runs_dirs()[-1]  # no key in the run record: rendered tree, log, summary
    found = subprocess.run(["grep", "-rl", "PRIVATE KEY", str(run)], capture_output=True,
                           text=True)
    assert found.stdout == "", found.stdout
    trusted = lab.ssh(CLIENT, "test -f /usr/local/share/ca-certificates/deploykit-ca.crt && "
                              "openssl x509 -noout -subject "
                              "-in /usr/local/share/ca-certificates/deploykit-ca.crt")
    assert "deploykit CA lab" in trusted


def test_dns_and_s3_over_https_from_a_serving_host(tls_lab: tuple[Lab, dict]) -> None:
    lab, _ = tls_lab
    for name in ("s3.lab.test", "lmcache.s3.lab.test"):
        listing = lab.ssh(CLIENT, f"getent ahostsv4 {name}")
        assert {line.split()[0] for line in listing.splitlines()} == set(RGW), listing
    # Python's default context on the host: its system trust store, SNI lmcache.s3.lab.test
    result = s3_round_trip(lab, CLIENT, 8 * 1024 * 1024, tls=True)
    assert (result["put"], result["get"], result["delete"]) == (200, 200, 204), result
    assert result["same"] and result["bytes"] == 8 * 1024 * 1024


def test_verify_and_lmcache_round_trip_over_tls(tls_lab: tuple[Lab, dict]) -> None:
    lab, _ = tls_lab
    ensure_driver_venv()
    result = lab.deploykit("verify", "--inventory", "lab", "--roundtrip", "--json",
                           check=False)
    findings = json.loads(result.stdout)["findings"]
    failing = [f for f in findings if f["status"] == "fail"]
    # what TLS touches; the serving checks depend on DEPLOYKIT_LAB_SERVING (reported above)
    relevant = {"s3-tls-certificate", "s3-roundtrip", "s3-credentials-valid",
                "s3-concentrator-reachable", "s3-vhost-routing", "s3-bucket-lifecycle",
                "dns-answer-count", "dns-client-resolution", "consul-service-health",
                "lmcache-s3-settings", "lmcache-remote-url", "lmcache-roundtrip",
                "lmcache-object-names", "lmcache-seed-mismatch"}
    assert not [f for f in failing if f["check"] in relevant], failing
    certs = [f for f in findings if f["check"] == "s3-tls-certificate"]
    assert sorted(f["target"] for f in certs) == [f"{a}:443" for a in RGW]
    assert all(f["status"] == "pass" and "*.s3.lab.test" in f["message"] for f in certs), certs
    trips = [f for f in findings if f["check"] == "s3-roundtrip"]
    assert trips and all(f["status"] == "pass" for f in trips), trips
    trip = next(f for f in findings if f["check"] == "lmcache-roundtrip")
    assert trip["status"] == "pass" and "byte-identical" in trip["message"], trip


def test_nixl_obj_round_trip_over_tls(tls_lab: tuple[Lab, dict]) -> None:
    """NIXL's OBJ plugin over https with the rendered ca_bundle (the serving host's system
    store, where deploykit put the site CA): NIXL's bundled curl has no CA file of its own
    on Debian."""
    lab, _ = tls_lab
    ensure_driver_venv()
    result = lab.deploykit("verify", "--inventory", "lab", "--roundtrip-store", "nixl",
                           "--json", "--check", "s3-tls-certificate")
    findings = {f["check"]: f for f in json.loads(result.stdout)["findings"]}
    trip = findings["lmcache-roundtrip"]
    assert trip["status"] == "pass" and "hit 2/2, byte-identical" in trip["message"], trip
    assert "NIXL OBJ at https://s3.lab.test/lmcache" in trip["message"]
