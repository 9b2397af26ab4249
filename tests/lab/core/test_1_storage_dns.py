"""The storage + DNS tier deployed for real on the lab, end to end."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.lab.conftest import LAB_INVENTORY, Lab, ceph, runs_dirs, s3_round_trip

pytestmark = pytest.mark.lab

CLIENT, RGW = "10.99.0.13", ("10.99.0.11", "10.99.0.12")
WATCHED = ["/etc/ceph/ceph.conf", "/etc/haproxy/haproxy.cfg", "/etc/coredns/Corefile",
           "/etc/consul.d/consul.json", "/etc/consul.d/s3-service.json",
           "/usr/local/bin/consul", "/etc/systemd/system/coredns.service"]


def lab_settings() -> dict:
    return yaml.safe_load((LAB_INVENTORY / "group_vars/all/lab.yml").read_text())


def test_second_run_changes_nothing(converged: Lab) -> None:
    # --full: every role's every task runs again, and finds nothing to change
    second = converged.converge("--full")
    assert second["changed"] == 0, second["changed_tasks"]
    assert all(s["changed"] == 0 and s["failed"] == 0 for s in second["hosts"].values())
    assert set(second["hosts"]) == {"ceph-admin", "lab1", "lab2", "lab3", "lab4"}
    assert second["converge_records"] == {}  # --full compares nothing
    # by default every host's record holds (inputs, files, units, the cluster's pools, user
    # and bucket): each is left out of every play
    third = converged.converge()
    assert third["changed"] == 0 and not third["failed"], third["changed_tasks"]
    assert third["converge_records"] == {h: [] for h in second["hosts"]}, \
        third["converge_records"]


def _fingerprints(lab: Lab) -> dict[str, str]:
    out = {}
    for address in RGW:
        listing = lab.ssh(address, "sha256sum " + " ".join(WATCHED) + "; stat -c '%Y %n' "
                          + " ".join(WATCHED))
        out[address] = listing
    return out


def test_check_diff_reports_and_changes_nothing(converged: Lab) -> None:
    before = _fingerprints(converged)
    summary = converged.converge("--check", "--diff")
    assert summary["changed"] == 0 and not summary["failed"]
    assert "--check" in summary["argv"] and "--diff" in summary["argv"]
    assert _fingerprints(converged) == before


def test_names_resolve_to_every_gateway_host_from_a_client(converged: Lab) -> None:
    for name in ("s3.lab.test", "lmcache.s3.lab.test", "other-bucket.s3.lab.test"):
        listing = converged.ssh(CLIENT, f"getent ahostsv4 {name}")
        addresses = {line.split()[0] for line in listing.splitlines()}
        assert addresses == set(RGW), (name, listing)


def test_64mib_object_round_trips_through_the_name(converged: Lab) -> None:
    result = s3_round_trip(converged, CLIENT, 64 * 1024 * 1024)
    assert result["put"] == 200 and result["get"] == 200 and result["delete"] == 204, result
    assert result["same"] and result["bytes"] == 64 * 1024 * 1024
    assert result["resolved"] == sorted(RGW)


def test_each_concentrator_answers(converged: Lab) -> None:
    for address in RGW:
        s3 = converged.ssh(CLIENT, f"curl -s -o /dev/null -w '%{{http_code}}' http://{address}/")
        health = converged.ssh(CLIENT, f"curl -s -o /dev/null -w '%{{http_code}}' "
                               f"http://{address}:1967/health")
        assert s3 == "200" and health == "200", (address, s3, health)


def test_pools_have_the_planned_settings(converged: Lab) -> None:
    pools = {p["pool_name"]: p for p in json.loads(ceph("osd", "pool", "ls", "detail",
                                                        "-f", "json"))}
    for spec in lab_settings()["ceph_rgw_pools_list"]:
        pool = pools[spec["name"]]
        assert (pool["pg_num"], pool["size"], pool["min_size"]) == \
            (spec["pg_num"], spec["size"], spec["min_size"])
        assert "rgw" in pool["application_metadata"]
        assert pool["pg_autoscale_mode"] == "off"


def test_gateways_and_concentrators_are_systemd_units(converged: Lab) -> None:
    for name, address in zip(("lab1", "lab2"), RGW, strict=True):
        units = [f"ceph-radosgw@rgw.{name}.0", f"ceph-radosgw@rgw.{name}.1", "haproxy",
                 "coredns", "consul"]
        states = converged.ssh(address, "systemctl is-active " + " ".join(units)).split()
        assert states == ["active"] * len(units)
        enabled = converged.ssh(address, "systemctl is-enabled " + " ".join(units)).split()
        assert enabled == ["enabled"] * len(units)
    assert "rgw: 4 daemons active" in ceph("-s").replace("\n", " ")


def test_secret_key_appears_in_no_output_or_run_record(converged: Lab) -> None:
    info = json.loads(subprocess.run(
        ["radosgw-admin", "--conf", "/var/lib/deploykit-lab/ceph/ceph.conf", "user", "info",
         "--uid", "lmcache"], check=True, capture_output=True, text=True).stdout)
    secret = info["keys"][0]["secret_key"]
    assert len(secret) >= 20
    for text in converged.outputs:
        assert secret not in text
    written = [p for d in runs_dirs() for p in d.rglob("*") if p.is_file()]
    assert written
    for path in written:
        assert secret.encode() not in path.read_bytes(), path
    assert secret.encode() not in LAB_INVENTORY.joinpath(
        "group_vars/all/lab.yml").read_bytes()


def test_bucket_is_bounded_by_plans_quota(converged: Lab) -> None:
    from deploy_kit.ops.site import open_site
    from deploy_kit.render.s3_access import quota_bytes

    expected = quota_bytes(open_site(str(LAB_INVENTORY)))
    stats = json.loads(subprocess.run(
        ["radosgw-admin", "--conf", "/var/lib/deploykit-lab/ceph/ceph.conf", "bucket", "stats",
         "--bucket", "lmcache"], check=True, capture_output=True, text=True).stdout)
    assert stats["owner"] == "lmcache"
    assert expected > 0 and (stats["bucket_quota"]["enabled"],
                             stats["bucket_quota"]["max_size"]) == (True, expected)


def test_lab_status_reports_up(lab: Lab) -> None:
    result = lab.deploykit("lab", "status", "--json")
    assert json.loads(result.stdout)["up"] is True
    assert json.loads(result.stdout)["profile"] == "serving"


def test_lab_up_on_a_running_lab_writes_this_checkouts_inventory(lab: Lab,
                                                                 tmp_path: Path) -> None:
    """As from a second checkout: no inventory/lab here, the lab already up."""
    inventory = LAB_INVENTORY
    kept = tmp_path / "lab"
    shutil.move(inventory, kept)
    try:
        result = lab.deploykit("lab", "up")
        assert "lab is already up" in result.stdout + result.stderr
        for name in ("hosts.yml", "group_vars/all/lab.yml"):
            assert (inventory / name).read_text() == (kept / name).read_text(), name
    finally:
        shutil.rmtree(inventory, ignore_errors=True)
        shutil.move(kept, inventory)




def test_other_names_go_through_the_catch_all_block_to_the_upstream(converged: Lab) -> None:
    """The Corefile's `.:53` block forwards to the controller's resolver (lab/upstream.py)."""
    listing = converged.ssh(CLIENT, "getent ahostsv4 upstream.lab.test")
    assert {line.split()[0] for line in listing.splitlines()} == {"10.99.0.1"}, listing
    for dns_host in RGW:
        corefile = converged.ssh(dns_host, "cat /etc/coredns/Corefile")
        assert "\n.:53 {\n" in corefile and "10.99.0.1:5300" in corefile
    missing = converged.ssh(CLIENT, "getent ahostsv4 nothing.lab.test || echo absent")
    assert missing.strip() == "absent"


def test_consuls_api_is_closed_to_the_network_and_open_on_the_host(converged: Lab) -> None:
    """Secure by default: the HTTP API listens on loopback only (and under ACLs, default
    deny, since this profile keeps the defaults), so nothing on the storage network may
    register an `s3` instance; Consul's DNS, which CoreDNS forwards to, still answers on the
    host's address (the name test above)."""
    consul_server = "10.99.0.13"
    for address in (consul_server, *RGW):
        with pytest.raises(OSError):
            socket.create_connection((address, 8500), timeout=3).close()
    leader = converged.ssh(consul_server, "python3 -c \"import urllib.request; print(urllib."
                           "request.urlopen('http://127.0.0.1:8500/v1/status/leader').read()"
                           ".decode())\"")
    assert leader.strip().strip('"').endswith(":8300"), leader
