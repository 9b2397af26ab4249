"""`deploykit status` end to end through the real transport (ansible-runner, the inventory,
the shell module) on hosts Ansible reaches with its local connection: each host's script
runs, its output is parsed, one unreachable host is reported (exit 5) while every other
host is still listed, and a version mix across the serving hosts is marked. The serving
hosts' venvs are stand-ins whose `python` prints versions; the converge records and the
controller's run record are files the test writes."""

from __future__ import annotations

import copy
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cli import run_cli
from tests.conftest import BASE_HOSTS, InventoryFactory

LOCAL = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
DOWN = {"ansible_ssh_common_args": "-o ConnectTimeout=2", "ansible_ssh_retries": 0}


@pytest.fixture
def hostdir() -> Iterator[Path]:
    """Where the stand-in hosts keep their converge records: outside /tmp, which inventory
    validation refuses for a record path (a world-writable tree)."""
    import shutil
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="deploykit-status-test-", dir=Path.home()))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _venv(root: Path, vllm: str) -> Path:
    """A stand-in serving venv: its python prints what importlib.metadata would."""
    python = root / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(f"#!/bin/sh\necho lmcache 0.5.6\necho vllm {vllm}\n")
    python.chmod(0o755)
    return root


def _inventory(make_inventory: InventoryFactory, tmp: Path, home: Path) -> tuple[Path, Path]:
    hosts: dict[str, Any] = copy.deepcopy(BASE_HOSTS)
    children = hosts["all"]["children"]
    record = home / "gpu1" / "deploykit" / "converged.json"
    record.parent.mkdir(parents=True)
    # a record from 2 minutes ago that watched a unit this machine does not run
    record.write_text(json.dumps({"digest": "x", "paths": {}, "units": ["vllm"],
                                  "probes": {}}))
    then = time.time() - 120
    os.utime(record, (then, then))
    for n, (group, members) in enumerate(children.items()):
        for m, hostvars in enumerate(members["hosts"].values()):
            hostvars.update(LOCAL, ansible_host=f"127.0.{n + 1}.{m + 2}",
                            deploykit_common_record_path=str(
                                home / f"{group}-{m}" / "deploykit" / "converged.json"))
    children["vllm"]["hosts"]["gpu1"].update(
        vllm_venv=str(_venv(tmp / "venv1", "0.11.0")), deploykit_common_record_path=str(record))
    children["vllm"]["hosts"]["gpu2"].update(vllm_venv=str(_venv(tmp / "venv2", "0.11.1")))
    # the Consul server: unreachable (TEST-NET, never routed)
    children["consul_servers"]["hosts"]["c1"] = {"ansible_host": "192.0.2.7", **DOWN}
    return make_inventory(hosts), record


def _runs(root: Path, inventory: Path) -> None:
    """An `up` run record of this inventory, started a minute ago, that failed on gpu2."""
    stamp = time.strftime("%Y%m%dT%H%M%S.000000Z", time.gmtime(time.time() - 60))
    run = root / f"{stamp}-up"
    run.mkdir(parents=True)
    (run / "summary.json").write_text(json.dumps({
        "verb": "up", "status": "failed",
        "argv": ["ansible-playbook", "-i", str(inventory.resolve()), "site.yml"],
        "hosts": {"gpu1": {"ok": 3, "failed": 0, "unreachable": 0},
                  "gpu2": {"ok": 2, "failed": 1, "unreachable": 0}},
        "failed": [{"host": "gpu2", "task": "Wait for vLLM health", "play": "p",
                    "message": "timeout"}],
        "converge_records": {"gpu1": []}}))


def test_status_reads_every_host_and_reports_the_unreachable_one(
        make_inventory: InventoryFactory, tmp_path: Path, hostdir: Path) -> None:
    inventory, _record = _inventory(make_inventory, tmp_path, hostdir)
    _runs(tmp_path / "runs", inventory)
    started = time.monotonic()
    result = run_cli("status", "-i", str(inventory), "--json",
                     env={"ANSIBLE_SSH_RETRIES": "0",
                          "DEPLOYKIT_RUNS_DIR": str(tmp_path / "runs")})
    elapsed = time.monotonic() - started
    assert result.returncode == 5, result.stderr  # c1 could not be read
    assert "c1: unreachable through Ansible" in result.stderr, result.stderr
    doc = json.loads(result.stdout)
    assert doc["schema"] == "deploykit-status/1"
    hosts = {h["name"]: h for h in doc["hosts"]}
    assert set(hosts) == {"adm1", "rgw1", "rgw2", "c1", "dns1", "gpu1", "gpu2"}
    assert not hosts["c1"]["reachable"] and set(doc["unreachable"]) == {"c1"}
    # every other host ran its script: the clock, the units it was asked about
    for name in ("adm1", "rgw1", "rgw2", "dns1", "gpu1", "gpu2"):
        assert hosts[name]["reachable"] and hosts[name]["clock"], hosts[name]
    assert [u["unit"] for u in hosts["gpu1"]["units"]] == [
        "deploykit-lmcache-s3-events.timer", "lmcache-server", "prometheus-node-exporter",
        "vllm", "vllm-front"]
    assert {u["unit"] for u in hosts["rgw1"]["units"]} == {
        *(f"ceph-radosgw@rgw.rgw1.{i}" for i in range(4)), "consul", "haproxy"}
    # versions: the serving venvs' own, and a mix marked
    assert hosts["gpu1"]["versions"] == {"lmcache": "0.5.6", "vllm": "0.11.0"}
    assert doc["versions"]["vllm"] == {"0.11.0": ["gpu1"], "0.11.1": ["gpu2"]}
    assert doc["versions"]["lmcache"] == {"0.5.6": ["gpu1", "gpu2"]}
    assert "vllm" in doc["mixed"] and "lmcache" not in doc["mixed"]
    # the converge record: gpu1's, two minutes old, its recorded unit not active here; gpu2
    # has none, and the newer run record says it failed there
    gpu1, gpu2 = hosts["gpu1"]["converge"], hosts["gpu2"]["converge"]
    assert gpu1["present"] and 100 < gpu1["age_s"] < 600 and gpu1["units_down"] == ["vllm"]
    assert gpu1["outcome"] == "ok" and gpu1["last_run"]["outcome"] == "left out (record holds)"
    assert not gpu2["present"] and gpu2["outcome"] == "failed"
    assert gpu2["last_run"]["task"] == "Wait for vLLM health"
    assert hosts["dns1"]["converge"]["outcome"] == "none"
    # DNS: the CoreDNS address answers nothing, so no gateway is called a member, and why
    assert hosts["rgw1"]["membership"]["dns"] is None
    assert any(n.startswith("dns: CoreDNS 127.0.") for n in doc["notes"]), doc["notes"]
    assert any(n.startswith("consul:") for n in doc["notes"]), doc["notes"]
    assert elapsed < 60, elapsed


def test_status_table_lists_each_tier_and_the_mix(make_inventory: InventoryFactory,
                                                  tmp_path: Path, hostdir: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """...while another run (`up`) holds the site's lock: status reads, it takes no lock."""
    from deploy_kit.ops.site_lock import site_lock

    monkeypatch.setenv("DEPLOYKIT_LOCK_DIR", str(tmp_path / "locks"))
    inventory, _ = _inventory(make_inventory, tmp_path, hostdir)
    with site_lock(inventory, "up"):
        result = run_cli("status", "-i", str(inventory), "--limit", "vllm",
                         env={"DEPLOYKIT_RUNS_DIR": str(tmp_path / "runs")})
    assert result.returncode == 0, result.stderr  # c1 is outside the limit: not tried
    assert "192.0.2." not in result.stderr
    out = result.stdout
    assert "serving" in out and "storage / gateways" not in out, out
    assert "vllm (mixed)" in out and "mixed versions: vllm" in out, out
    assert "gpu1" in out and "rgw1" not in out, out
    assert "consul: every Consul server is outside --limit" in out, out
    assert "dns: every CoreDNS is outside --limit" in out, out
