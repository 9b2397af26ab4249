"""`deploykit status -i lab --json` on the converged lab (docs/day2.md, status): every host
listed with its units active and the versions it really runs, both gateways in DNS and
passing in Consul, no breaker tripped, each host's last converge ok. One status call: it
must stay cheap (a few seconds) in `make test`.

With DEPLOYKIT_STATUS_SAMPLE=DIR the test also writes the human table and times `verify`
against it there (docs/day2.md "Status" quotes both)."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import pytest

from tests.lab.conftest import LAB_INVENTORY, Lab

pytestmark = pytest.mark.lab

GATEWAYS, SERVING = ("lab1", "lab2"), ("lab3", "lab4")
VERSION = re.compile(r"^\d+\.\d+\.\d+")


def _pins() -> tuple[str, str]:
    """The vLLM and LMCache versions the lab inventory pins (what `up` installed)."""
    from deploy_kit.ops.site import open_site

    c = open_site([str(LAB_INVENTORY)]).hosts["lab3"].config
    return c.vllm_version, c.lmcache_version


def test_status_lists_every_host_with_units_versions_and_membership(converged: Lab) -> None:
    started = time.monotonic()
    result = converged.deploykit("status", "--inventory", "lab", "--json")
    seconds = time.monotonic() - started
    doc = json.loads(result.stdout)
    assert doc["schema"] == "deploykit-status/1" and doc["unreachable"] == {}
    hosts = {h["name"]: h for h in doc["hosts"]}
    assert set(hosts) == {"ceph-admin", *GATEWAYS, *SERVING}, sorted(hosts)
    for name in (*GATEWAYS, *SERVING):
        host = hosts[name]
        assert host["reachable"], host
        installed = {u["unit"]: u["active"] for u in host["units"]
                     if u["load"] not in ("not-found", "")}
        assert installed and set(installed.values()) == {"active"}, (name, installed)
        assert all(u["since"] for u in host["units"] if u["unit"] in installed), host["units"]
        converge = host["converge"]
        assert converge["present"] and converge["outcome"] == "ok", (name, converge)
        assert converge["units_down"] == [] and converge["age_s"] < 3600, (name, converge)
    for name in ("lab1", "lab2", "lab3"):  # the Consul agents: gateways and the server
        assert VERSION.match(hosts[name]["versions"].get("consul", "")), hosts[name]
    assert "consul" not in hosts["lab4"]["versions"]  # no Consul agent on a serving client
    for name in GATEWAYS:
        host = hosts[name]
        units = {u["unit"] for u in host["units"]}
        assert {f"ceph-radosgw@rgw.{name}.0", f"ceph-radosgw@rgw.{name}.1", "haproxy",
                "consul", "coredns"} <= units, units
        versions = host["versions"]
        assert versions["ceph"].startswith("16.2.") and VERSION.match(versions["haproxy"])
        assert VERSION.match(versions["coredns"]), versions
        membership = host["membership"]
        assert membership["dns"] is True and set(membership["dns_servers"]) == {
            hosts[g]["address"] for g in GATEWAYS}, membership
        assert membership["consul_member"] == "alive" and membership["consul_s3"] == \
            "passing", membership
    vllm, lmcache = _pins()
    for name in SERVING:
        host = hosts[name]
        assert host["versions"]["vllm"] == vllm and host["versions"]["lmcache"] == lmcache, \
            host["versions"]
        assert host["breaker"]["tripped"] is False, host["breaker"]
        assert host["instances"] and all(i["health"] == 200 for i in host["instances"]), \
            host["instances"]
    # lab3 runs two vLLM instances, each its own unit, both listed
    assert {i["unit"] for i in hosts["lab3"]["instances"]} == {"vllm", "vllm-1"}
    assert hosts["lab3"]["membership"]["consul_member"] == "alive"  # the Consul server
    assert hosts["ceph-admin"]["versions"]["ceph"].startswith("16.2.")
    assert hosts["ceph-admin"]["converge"]["outcome"] == "ok", hosts["ceph-admin"]
    assert doc["ceph_daemons"].get("mon"), doc["ceph_daemons"]
    assert not {"vllm", "lmcache"} & set(doc["mixed"]), doc["mixed"]
    print(f"status: {seconds:.1f} s ({doc['seconds']} s reading); mixed: {doc['mixed']}; "
          f"notes: {doc['notes']}")
    assert seconds < 30, seconds
    sample = os.environ.get("DEPLOYKIT_STATUS_SAMPLE")
    if sample:
        _sample(converged, Path(sample), seconds)


def _sample(lab: Lab, out: Path, json_seconds: float) -> None:
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    table = lab.deploykit("status", "--inventory", "lab", check=False)
    status_s = time.monotonic() - started
    (out / "status.txt").write_text(table.stdout + table.stderr)
    started = time.monotonic()
    verify = lab.deploykit("verify", "--inventory", "lab", "--json", check=False)
    verify_s = time.monotonic() - started
    (out / "timings.json").write_text(json.dumps(
        {"status_json_s": round(json_seconds, 1), "status_table_s": round(status_s, 1),
         "status_table_rc": table.returncode, "verify_s": round(verify_s, 1),
         "verify_rc": verify.returncode}, indent=1) + "\n")
