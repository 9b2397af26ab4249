"""Consul mode on the lab, and the failover it promises, measured.

A gateway (HAProxy + every radosgw on one RGW host) stops: every DNS server must stop
answering that host within check interval + DNS TTL, S3 through the name and `verify`'s
round trips keep passing through the other host, and verify names the dead one. Restored,
the address returns within the same bound. Then the same for the whole host (its container
powered off). The measured figures are printed (pytest -s) and quoted in docs/lab.md.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time

import dns.exception
import dns.message
import dns.query
import pytest
import yaml

from tests.conftest import REPO
from tests.lab.conftest import Lab, s3_round_trip

pytestmark = pytest.mark.lab

CLIENT = "10.99.0.13"
RGW = {"lab1": "10.99.0.11", "lab2": "10.99.0.12"}
NAMES = ("s3.lab.test.", "lmcache.s3.lab.test.")
FIGURES: dict[str, float] = {}


def settings() -> dict:
    return yaml.safe_load((REPO / "inventory/lab/group_vars/all/lab.yml").read_text())


def bound_s() -> float:
    s = settings()
    return float(s["consul_check_interval"].rstrip("s")) + float(s["deploykit_dns_ttl"])


def answers(server: str) -> set[str] | None:
    """A records of both names from one DNS server; None when it does not answer."""
    got: set[str] = set()
    for name in NAMES:
        try:
            reply = dns.query.udp(dns.message.make_query(name, "A"), server, timeout=0.5)
        except (OSError, dns.exception.Timeout):
            return None
        got |= {r.address for rrset in reply.answer for r in rrset}
    return got


def wait_dns(servers: list[str], expected: set[str], timeout: float) -> float:
    """Seconds until every listed DNS server answers exactly `expected` for both names."""
    start = time.monotonic()
    while True:
        if all(answers(s) == expected for s in servers):
            return time.monotonic() - start
        if time.monotonic() - start > timeout:
            pytest.fail(f"DNS still {({s: answers(s) for s in servers})}, "
                        f"expected {sorted(expected)}")
        time.sleep(0.05)


def s3_through_name(lab: Lab) -> dict:
    return s3_round_trip(lab, CLIENT, 8 * 1024 * 1024)


def verify(lab: Lab, *extra: str) -> tuple[int, dict[str, list[dict]]]:
    result = lab.deploykit("verify", "--inventory", "lab", "--json", *extra, check=False)
    findings: dict[str, list[dict]] = {}
    for f in json.loads(result.stdout)["findings"]:
        findings.setdefault(f["check"], []).append(f)
    return result.returncode, findings


def failing(findings: dict[str, list[dict]], check: str) -> list[str]:
    return [f["target"] for f in findings.get(check, []) if f["status"] == "fail"]


def test_consul_mode_is_the_lab_default_and_verify_sees_consul(converged: Lab) -> None:
    assert settings()["deploykit_dns_mode"] == "consul"
    version = converged.ssh(RGW["lab1"], "/usr/local/bin/consul version").splitlines()[0]
    assert version == "Consul v1.16.3"
    sums = {converged.ssh(a, "sha256sum /usr/local/bin/consul").split()[0]
            for a in [*RGW.values(), CLIENT]}
    assert sums == {settings()["consul_binary_sha256"]}
    assert wait_dns(list(RGW.values()), set(RGW.values()), 30) >= 0
    rc, findings = verify(converged)
    for check in ("consul-members-alive", "consul-service-health", "consul-dns-agreement"):
        statuses = {f["target"]: f["status"] for f in findings[check]}
        assert set(statuses.values()) == {"pass"}, (check, statuses)
    assert {f["target"] for f in findings["consul-members-alive"]} == {"lab1", "lab2", "lab3"}
    assert rc == 0, {k: v for k, v in findings.items() if failing(findings, k)}


def test_gateway_down_leaves_dns_within_the_bound_and_s3_keeps_working(
        converged: Lab) -> None:
    dead, live = RGW["lab2"], RGW["lab1"]
    converged.ssh(dead, "systemctl stop haproxy 'ceph-radosgw@*'")
    FIGURES["gateway down: left DNS"] = gone = wait_dns(list(RGW.values()), {live},
                                                        bound_s() + 10)
    trip = s3_through_name(converged)
    assert trip["put"] == 200 and trip["get"] == 200 and trip["same"], trip
    assert trip["resolved"] == [live]
    rc, findings = verify(converged)
    assert rc == 6
    assert failing(findings, "s3-concentrator-reachable") == [dead]
    assert failing(findings, "consul-service-health") == ["s3@lab2"]
    assert not failing(findings, "consul-dns-agreement")
    assert not failing(findings, "consul-members-alive")
    assert not failing(findings, "s3-roundtrip") and findings["s3-roundtrip"]
    assert not failing(findings, "dns-answer-count")  # DNS has already dropped it

    converged.ssh(dead, "systemctl start 'ceph-radosgw@rgw.lab2.0' 'ceph-radosgw@rgw.lab2.1' "
                  "haproxy")
    start = time.monotonic()
    while subprocess.run(["curl", "-sf", "-o", "/dev/null", f"http://{dead}:1967/health"],
                         check=False).returncode != 0:
        assert time.monotonic() - start < 60, "the concentrator did not come back"
        time.sleep(0.1)
    FIGURES["gateway restored: back in DNS"] = back = wait_dns(
        list(RGW.values()), set(RGW.values()), bound_s() + 10)
    print(f"\nfailover (gateway): left DNS {gone:.2f} s, back {back:.2f} s after /health "
          f"answered; bound {bound_s():.0f} s")
    assert gone <= bound_s() and back <= bound_s()


def test_whole_rgw_host_down_leaves_dns_and_comes_back(converged: Lab) -> None:
    from deploykit_lab.lab import start_host, stop_host

    live = RGW["lab1"]
    # poll DNS while the container powers off (its agent leaves on SIGTERM)
    start = time.monotonic()
    stopper = threading.Thread(target=stop_host, args=("lab2",))
    stopper.start()
    FIGURES["host down: left DNS"] = gone = wait_dns([live], {live}, bound_s() + 30)
    stopper.join(timeout=60)
    stopped = time.monotonic() - start
    trip = s3_through_name(converged)
    assert trip["put"] == 200 and trip["get"] == 200 and trip["same"], trip
    rc, findings = verify(converged)
    assert rc == 6
    assert failing(findings, "s3-concentrator-reachable") == [RGW["lab2"]]
    assert failing(findings, "consul-members-alive") == ["lab2"]
    assert failing(findings, "consul-service-health") == ["s3@lab2"]
    assert not failing(findings, "s3-roundtrip")

    start_host("lab2")
    FIGURES["host restored: back in DNS (from boot)"] = back = wait_dns(
        list(RGW.values()), set(RGW.values()), 120)
    print(f"\nfailover (host): left DNS {gone:.2f} s after the poweroff began (the "
          f"poweroff and cleanup took {stopped:.2f} s); back {back:.2f} s after boot; "
          f"bound {bound_s():.0f} s")
    assert gone <= bound_s()
    deadline = time.monotonic() + 90  # the rebooted gateways re-register with Ceph
    while True:
        rc, findings = verify(converged)
        if rc == 0 or time.monotonic() > deadline:
            break
        time.sleep(3)
    assert rc == 0, {k: failing(findings, k) for k in findings if failing(findings, k)}


# A crashed host's agent cannot leave: Consul learns of it through gossip failure detection
# (probe every 1 s, then a suspicion timeout of 4 s that can stretch to 24 s when no other
# member confirms), then DNS drops it. Bound: 1 s + 24 s + check interval + TTL.
CRASH_BOUND_S = 1 + 24


def test_crashed_rgw_host_leaves_dns_through_failure_detection(converged: Lab) -> None:
    from deploykit_lab.lab import crash_host, start_host

    live = RGW["lab1"]
    crasher = threading.Thread(target=crash_host, args=("lab2",))
    crasher.start()  # the SIGKILLs come first; DNS is polled from that moment
    FIGURES["host crash: left DNS"] = gone = wait_dns([live], {live},
                                                      CRASH_BOUND_S + bound_s() + 30)
    crasher.join(timeout=60)
    _, findings = verify(converged)
    assert failing(findings, "consul-members-alive") == ["lab2"]
    assert not failing(findings, "s3-roundtrip")
    start_host("lab2")
    back = wait_dns(list(RGW.values()), set(RGW.values()), 120)
    print(f"\nfailover (host crash, SIGKILL): left DNS {gone:.2f} s after the kill; "
          f"back {back:.2f} s after boot; bound {CRASH_BOUND_S + bound_s():.0f} s")
    assert gone <= CRASH_BOUND_S + bound_s()
    deadline = time.monotonic() + 90
    while True:
        rc, findings = verify(converged)
        if rc == 0 or time.monotonic() > deadline:
            break
        time.sleep(3)
    assert rc == 0, {k: failing(findings, k) for k in findings if failing(findings, k)}
