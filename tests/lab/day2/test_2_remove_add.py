"""Removing a gateway host under load, then adding it back (docs/day2.md, remove).

`deploykit remove -i lab lab2 --yes` while a client keeps sending fresh prompts to both
serving hosts: lab2 leaves DNS (Consul maintenance, every CoreDNS stops naming it, the TTL),
its gateways drain inside HAProxy, its concentrator, gateways and CoreDNS stop and are
disabled, its Consul agent leaves (the catalog forgets it), its converge record goes. No
prompt fails and the remaining CoreDNS answers the S3 name with lab1's address only. Then
`up` (lab2 still in the inventory: "adding" a host is `up` with it there) converges lab2 alone
(the others are left out by their converge records) and the name has both addresses again."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from deploy_kit.ops.secrets_store import read_store
from deploy_kit.ops.site import open_site
from tests.lab.conftest import LAB_INVENTORY, VAULT_PASSWORD, Lab, record_timing
from tests.lab.failover.test_consul_failover import answers, wait_dns
from tests.lab.load import FreshPrompts
from tests.lab.vllm_http import SERVING

pytestmark = pytest.mark.lab

GATEWAYS = {"lab1": "10.99.0.11", "lab2": "10.99.0.12"}  # also the lab's CoreDNS hosts
CONSUL_SERVER = "10.99.0.13"
LAB2_UNITS = ("haproxy", "ceph-radosgw@rgw.lab2.0", "ceph-radosgw@rgw.lab2.1", "coredns",
              "consul")


def s3_nodes(lab: Lab) -> list[str]:
    """The nodes the Consul catalog lists for the s3 service (asked on the server, with the
    generated DNS token on stdin, never on a command line)."""
    site = open_site(str(LAB_INVENTORY), Path(VAULT_PASSWORD))  # the lab's vault opens it
    token = read_store(site).get("consul_acl_dns_token", "")
    out = lab.ssh(CONSUL_SERVER, "read -r CONSUL_HTTP_TOKEN; export CONSUL_HTTP_TOKEN; "
                  "/usr/local/bin/consul catalog nodes -service=s3", stdin=token + "\n")
    return sorted(line.split()[0] for line in out.splitlines()[1:] if line.strip())


def unit_states(lab: Lab, address: str) -> dict[str, tuple[str, str]]:
    states = {}
    for unit in LAB2_UNITS:
        out = lab.ssh(address, f"systemctl is-active {unit} || true; "
                               f"systemctl is-enabled {unit} || true").split()
        states[unit] = (out[0], out[1])
    return states


def test_remove_a_gateway_host_under_load_then_add_it_back(converged: Lab) -> None:
    assert wait_dns(list(GATEWAYS.values()), set(GATEWAYS.values()), 60) >= 0
    assert s3_nodes(converged) == ["lab1", "lab2"]

    # --check changes nothing (and shows the plan)
    checked = converged.deploykit("remove", "-i", "lab", "lab2", "--check")
    assert "check mode" in checked.stdout + checked.stderr
    assert answers(GATEWAYS["lab2"]) == set(GATEWAYS.values())

    one_record_at: list[float] = []
    start = time.monotonic()
    with FreshPrompts() as load:
        done = threading.Event()

        def watch() -> None:  # when lab1's CoreDNS first answers with lab1 alone
            while not done.is_set():
                if answers(GATEWAYS["lab1"]) == {GATEWAYS["lab1"]}:
                    one_record_at.append(time.monotonic() - start)
                    return
                time.sleep(0.1)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        removed = converged.deploykit("remove", "-i", "lab", "lab2", "--yes")
        remove_s = time.monotonic() - start
        done.set()
        watcher.join(timeout=5)
        time.sleep(5)  # prompts keep flowing on one gateway host
    assert load.sent >= 2 and not load.errors, (load.sent, load.errors)
    assert "now delete it from the inventory" in removed.stdout + removed.stderr

    # exactly one A record (lab1's) from every remaining CoreDNS; lab2's answers nothing
    assert answers(GATEWAYS["lab1"]) == {GATEWAYS["lab1"]}
    assert answers(GATEWAYS["lab2"]) is None
    assert s3_nodes(converged) == ["lab1"]
    states = unit_states(converged, GATEWAYS["lab2"])
    assert all(active != "active" and enabled == "disabled"
               for active, enabled in states.values()), states
    # its converge record is gone, its data and files stay (no --purge-data)
    assert converged.ssh(GATEWAYS["lab2"], "ls /etc/ceph /etc/consul.d | wc -l").strip() != "0"
    record_timing({"kind": "remove", "seconds": round(remove_s, 1),
                   "one_a_record_s": round(one_record_at[0], 1) if one_record_at else None,
                   "prompts": load.sent})

    # adding it back: lab2 is still in the inventory, so `up` converges it; the others are
    # left out by their converge records
    with FreshPrompts() as load:
        summary = converged.converge()
    assert summary["rc"] == 0 and not summary["failed"], summary["failed"]
    assert load.sent >= 2 and not load.errors, (load.sent, load.errors)
    records = summary["converge_records"]
    assert records["lab2"], records  # it converges: its record was forgotten
    assert all(records[h] == [] for h in ("lab1", "lab3", "lab4")), records
    changed_hosts = {t["host"] for t in summary["changed_tasks"]}
    assert not changed_hosts & {"lab1", "lab3", "lab4"}, summary["changed_tasks"]
    assert wait_dns(list(GATEWAYS.values()), set(GATEWAYS.values()), 60) >= 0
    assert s3_nodes(converged) == ["lab1", "lab2"]
    assert all(state == ("active", "enabled")
               for state in unit_states(converged, GATEWAYS["lab2"]).values())
    verify = converged.deploykit("verify", "-i", "lab", check=False)
    assert verify.returncode == 0, verify.stdout[-4000:]
    assert set(SERVING) == {"lab3", "lab4"}

