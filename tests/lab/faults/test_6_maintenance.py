"""Maintenance of the tier under load: a configuration change that restarts every
gateway, reloads every concentrator and Consul service definition and restarts every
CoreDNS, applied by `up` while a client keeps sending fresh prompts to both serving hosts.

The roles configure all hosts at once and restart one host at a time behind a drain
(Consul maintenance mode, DNS gate, HAProxy drain per gateway). So no prompt fails, no
serving process restarts, LMCache logs no S3 connection error (its breaker never trips),
and verify, the cross-host check included, is green. (Rolling the settings back is the same
roll again: it would add about 150 s to `make test` and prove nothing new, so the override
file is removed and the lab, torn down next, keeps the changed settings.)"""

from __future__ import annotations

import json

import pytest
import yaml

from tests.lab.conftest import LAB_INVENTORY, Lab
from tests.lab.load import FreshPrompts
from tests.lab.vllm_http import SERVING

pytestmark = pytest.mark.lab

GATEWAYS = {"lab1": "10.99.0.11", "lab2": "10.99.0.12"}
OVERRIDE = LAB_INVENTORY / "group_vars" / "all" / "zz-maintenance.yml"
CHANGES = {
    "ceph_rgw_thread_pool_size": 48,       # ceph.conf: every gateway restarts
    "ceph_rgw_concentrator_maxconn": 4000,  # haproxy.cfg: every concentrator reloads
    "coredns_metrics_port": 9154,          # Corefile: every CoreDNS restarts
    "consul_check_interval": "2s",         # s3-service.json: every gateway's agent reloads
}
SERVING_UNITS = ("vllm", "lmcache-server")


def invocations(lab: Lab, address: str, units: tuple[str, ...]) -> dict[str, str]:
    out = lab.ssh(address, " ".join(f"systemctl show -p InvocationID --value {u};"
                                    for u in units))
    return dict(zip(units, out.split(), strict=True))


def maintenance_tasks(summary: dict, prefix: str) -> list[str]:
    return [t["host"] for t in summary["changed_tasks"] if t["task"].startswith(prefix)]


def roll(lab: Lab) -> dict:
    """One `up` under load; what every maintenance run must keep."""
    serving_before = {n: invocations(lab, a, SERVING_UNITS) for n, a in SERVING.items()}
    gateways_before = {n: invocations(lab, a, ("haproxy",)) for n, a in GATEWAYS.items()}
    with FreshPrompts() as load:
        summary = lab.converge()
    assert summary["rc"] == 0 and not summary["failed"], summary["failed"]
    assert load.sent >= 2 and not load.errors, (load.sent, load.errors)

    # one gateway host at a time: out of DNS, restarted, back in, then the next
    out = maintenance_tasks(summary, "Take this host out of DNS")
    back = maintenance_tasks(summary, "Put this host back into DNS")
    assert sorted(out) == sorted(GATEWAYS) and out == back, summary["changed_tasks"]
    order = [(t["host"], t["task"][:4]) for t in summary["changed_tasks"]
             if t["task"].startswith(("Take this host out", "Put this host back"))]
    assert order == [(out[0], "Take"), (out[0], "Put "), (out[1], "Take"), (out[1], "Put ")]
    restarted = maintenance_tasks(summary, "Restart the gateway")
    assert sorted(restarted) == sorted(h for h in GATEWAYS for _ in range(2)), restarted
    assert sorted(maintenance_tasks(summary, "Restart coredns")) == sorted(GATEWAYS)
    # a reload, not a restart: the concentrators and the agents keep running
    assert not maintenance_tasks(summary, "Restart the concentrator")
    assert not maintenance_tasks(summary, "Restart consul")
    assert sorted(maintenance_tasks(summary, "Reload consul")) == sorted(GATEWAYS)
    assert {n: invocations(lab, a, ("haproxy",)) for n, a in GATEWAYS.items()} \
        == gateways_before

    assert {n: invocations(lab, a, SERVING_UNITS) for n, a in SERVING.items()} \
        == serving_before, "a serving process restarted"
    return summary


def test_gateway_dns_and_consul_changes_roll_without_touching_serving(converged: Lab) -> None:
    OVERRIDE.write_text(yaml.safe_dump(CHANGES))
    try:
        roll(converged)
        conf = converged.ssh(GATEWAYS["lab1"], "cat /etc/ceph/ceph.conf")
        assert "rgw thread pool size = 48" in conf, conf
        result = converged.deploykit("verify", "--inventory", "lab", "--json", check=False)
        findings = json.loads(result.stdout)["findings"]
        assert result.returncode == 0, [f for f in findings if f["status"] != "pass"]
        tier = {(f["check"], f["target"]): f["status"] for f in findings
                if f["check"] in ("lmcache-remote-tier", "lmcache-s3-breaker")}
        # pass, not warn: not one S3 connection error in either LMCache during the roll
        assert set(tier.values()) == {"pass"} and len(tier) == 4, tier
    finally:
        OVERRIDE.unlink(missing_ok=True)
