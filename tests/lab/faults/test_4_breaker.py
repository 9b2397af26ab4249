"""The cross-host tier after an outage: with both concentrators down while lab3
serves, lab3's LMCache server turns S3 off for the life of the process (its breaker). DRAM
still answers repeats on lab3, so only a read on another host, or the journal, shows it:
verify fails naming lab3 and the breaker's time, a plain `up` restarts lab3 (no file
changed) and nothing else, and verify is green again, the remote tier included. (lab3's
self-heal agent is paused for it: day2/test_3_self_heal.py proves the heal without `up`.)"""

from __future__ import annotations

import json
import random
import shlex
import time

import pytest

from deploy_kit.core.patterns import BREAKER as ANCHORED
from tests.lab.conftest import Lab
from tests.lab.vllm_http import complete

pytestmark = pytest.mark.lab

GATEWAYS = ("10.99.0.11", "10.99.0.12")
LAB3 = "10.99.0.13"
BREAKER = "S3L2Adapter disabled after"
HEAL_TASK = "Restart the running LMCache if it turned S3 off"


def verify(lab: Lab) -> tuple[int, list[dict]]:
    result = lab.deploykit("verify", "--inventory", "lab", "--json", check=False)
    return result.returncode, json.loads(result.stdout)["findings"]


def tripped(lab: Lab) -> bool:
    out = lab.ssh(LAB3, "id=$(systemctl show -p InvocationID --value lmcache-server); "
                        f"journalctl _SYSTEMD_INVOCATION_ID=$id -q --no-pager | "
                        f"grep -c '{BREAKER}' || true")
    return int(out.strip() or 0) > 0


def anchored(lab: Lab, output: str) -> int:
    """Lines of the running server's journal the anchored breaker pattern matches, in
    journalctl's `output` mode (short-iso: the heal task and verify; cat: the agent)."""
    out = lab.ssh(LAB3, "id=$(systemctl show -p InvocationID --value lmcache-server); "
                        f"journalctl _SYSTEMD_INVOCATION_ID=$id -o {output} -q --no-pager | "
                        f"grep -cE {shlex.quote(ANCHORED)} || true")
    return int(out.strip() or 0)


def test_a_tripped_breaker_fails_verify_naming_the_host_and_up_heals_it(converged: Lab
                                                                        ) -> None:
    rng = random.Random(time.time_ns())
    # lab3's agent would heal it by itself once storage is back (lmcache_self_heal, proven in
    # tests/lab/day2/test_3_self_heal.py): paused here, as an operator pauses it, so verify
    # sees the breaker and `up` heals it (and starts the timer again)
    converged.ssh(LAB3, "systemctl stop deploykit-lmcache-heal.timer")
    for gateway in GATEWAYS:
        converged.ssh(gateway, "systemctl stop haproxy")
    try:
        deadline = time.monotonic() + 180
        while not tripped(converged):  # each fresh prompt is two chunks LMCache fails to store
            assert time.monotonic() < deadline, "lab3's LMCache never turned S3 off"
            complete(LAB3, [rng.randrange(3, 259) for _ in range(256 * 2 + 5)])
            time.sleep(2)
    finally:
        for gateway in GATEWAYS:
            converged.ssh(gateway, "systemctl start haproxy")
    # LMCache's real line matches the anchored words (its logger's prefix and suffix) as
    # every reader sees it, colors or not
    assert anchored(converged, "short-iso") >= 1 and anchored(converged, "cat") >= 1
    for _ in range(60):  # back in Consul's DNS: check interval 1 s, TTL 5 s
        if len(converged.ssh(LAB3, "getent ahostsv4 s3.lab.test | awk '{print $1}' | "
                                   "sort -u").split()) == 2:
            break
        time.sleep(1)

    rc, findings = verify(converged)
    failing = [f for f in findings if f["status"] == "fail"]
    breaker = [f for f in failing if f["check"] == "lmcache-s3-breaker"]
    assert rc == 6 and [f["target"] for f in breaker] == ["lab3"], failing
    assert BREAKER in breaker[0]["message"] and "lmcache-server at 20" in breaker[0]["message"]
    remote = [f for f in failing if f["check"] == "lmcache-remote-tier"]
    assert remote and all(f["target"] == "lab3" for f in remote), remote
    assert any("lab3's LMCache turned S3 off" in f["message"] for f in remote), remote
    # the same-host check cannot see it: lab3's DRAM answers its own repeat
    same_host = [f for f in findings if f["check"] == "lmcache-cache-hit"]
    assert all(f["status"] == "pass" for f in same_host), same_host

    summary = converged.converge()
    healed = [t for t in summary["changed_tasks"] if HEAL_TASK in t["task"]]
    assert [t["host"] for t in healed] == ["lab3"], summary["changed_tasks"]
    assert not tripped(converged)
    assert converged.ssh(LAB3, "systemctl is-active deploykit-lmcache-heal.timer").strip() == \
        "active"

    rc, findings = verify(converged)
    assert rc == 0, [f for f in findings if f["status"] != "pass"]
    statuses = {(f["check"], f["target"]): f["status"] for f in findings
                if f["check"] in ("lmcache-remote-tier", "lmcache-s3-breaker")}
    # the ring's ends are instances of different hosts (lab3 runs two: the first writes,
    # the last reads)
    assert statuses == {("lmcache-remote-tier", "lab3/0→lab4"): "pass",
                        ("lmcache-remote-tier", "lab4→lab3/1"): "pass",
                        ("lmcache-s3-breaker", "lab3"): "pass",
                        ("lmcache-s3-breaker", "lab4"): "pass"}, statuses
