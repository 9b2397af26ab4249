"""verify --limit reads only the limited hosts: the storage, Consul and DNS hosts outside it
are neither logged into nor probed, their checks skip naming the group they need, and the
exit code reflects only what ran. The hosts outside are TEST-NET addresses (192.0.2.x, never
routed): contacting one would show as unreachable (exit 5) or as a failed probe."""

from __future__ import annotations

import copy
import json
import sys
import time
from pathlib import Path
from typing import Any

from tests.cli import run_cli
from tests.conftest import BASE_HOSTS, InventoryFactory

DOWN = {"ansible_ssh_common_args": "-o ConnectTimeout=2", "ansible_ssh_retries": 0}


def _inventory(make_inventory: InventoryFactory) -> Path:
    hosts: dict[str, Any] = copy.deepcopy(BASE_HOSTS)
    down = 10
    for group, members in hosts["all"]["children"].items():
        for n, hostvars in enumerate(members["hosts"].values()):
            if group == "vllm":  # reachable: Ansible's local connection, closed loopback ports
                hostvars.update(ansible_host=f"127.0.0.{n + 2}", ansible_connection="local",
                                ansible_python_interpreter=sys.executable)
            else:
                hostvars.update(ansible_host=f"192.0.2.{down}", **DOWN)
                down += 1
    return make_inventory(hosts)


def test_verify_limit_contacts_only_the_limited_hosts(make_inventory: InventoryFactory
                                                      ) -> None:
    inventory = str(_inventory(make_inventory))
    started = time.monotonic()
    result = run_cli("verify", "-i", inventory, "--limit", "vllm", "--json",
                     env={"ANSIBLE_SSH_RETRIES": "0"})
    elapsed = time.monotonic() - started
    assert result.returncode != 5, result.stderr  # no host outside the limit was tried
    assert "192.0.2." not in result.stderr and "unreachable" not in result.stderr, result.stderr
    findings = json.loads(result.stdout)["findings"]
    by_check: dict[str, list[dict[str, Any]]] = {}
    for f in findings:
        by_check.setdefault(f["check"], []).append(f)
    for check, needs in (("ceph-pools", "needs ceph_admin (adm1), outside --limit"),
                         ("ceph-rgw-daemons", "needs ceph_admin (adm1), outside --limit"),
                         ("dns-answer-count", "needs dns (dns1), outside --limit"),
                         ("s3-concentrator-reachable",
                          "needs rgw (rgw1, rgw2), outside --limit"),
                         ("s3-roundtrip", "needs rgw (rgw1, rgw2), outside --limit")):
        assert [(f["status"], f["message"]) for f in by_check[check]] == [("skip", needs)], \
            by_check[check]
    # the serving hosts were read (the local connection reaches them; this machine has no
    # LMCache config, which is what the check then says)
    read = by_check["serving-host-reachable"]
    assert {f["target"] for f in read} == {"gpu1", "gpu2"}, read
    assert not any("cannot read the host" in f["message"] for f in read), read
    assert elapsed < 60, elapsed


def test_without_limit_the_same_site_reports_the_storage_hosts_unreachable(
        make_inventory: InventoryFactory) -> None:
    """The control: these hosts really are down, so only the limit kept them out above."""
    inventory = str(_inventory(make_inventory))
    result = run_cli("verify", "-i", inventory, "--check", "ceph-pools",
                     env={"ANSIBLE_SSH_RETRIES": "0"})
    assert result.returncode == 5, result
    assert "adm1: unreachable through Ansible" in result.stderr, result.stderr
