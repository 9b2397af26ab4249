"""consul_tls_enabled for real: Consul agents (the lab's consul build) on loopback addresses
of their own, each with the `tls` block deploykit renders and the certificate deploykit
issues. Two servers (verify_server_hostname: each must show server.dc1.consul) elect a
leader and a client registers the rendered `s3` service over mutual-TLS RPC; an agent that
holds the gossip key (stolen) but a certificate from another CA cannot put its own `s3`
address into the catalog, so never into DNS. ACLs are off here to test TLS alone."""

from __future__ import annotations

import base64
import copy
import json
import os
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from deploy_kit.config.site import Site
from deploy_kit.ops import consul_tls, tls
from deploy_kit.ops.site import open_site
from deploy_kit.render.files import render_site
from tests.conftest import BASE_HOSTS, InventoryFactory

AGENTS = {"c1": "127.0.2.1", "c2": "127.0.2.2", "rgw1": "127.0.2.11", "rogue": "127.0.2.99"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def consul_bin() -> Path:
    from tests.tools import require_tool

    require_tool("go")  # built from the Go module proxy when not cached
    from deploykit_lab.consul import ensure_consul

    return ensure_consul()


def get(port: int, address: str, path: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(f"http://{address}:{port}{path}", timeout=3) as resp:
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")
    except OSError as exc:
        return 0, str(exc)


def wait_for(what: str, check: Any, timeout: float = 45) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        assert time.monotonic() < deadline, f"{what}: not within {timeout:.0f} s"
        time.sleep(0.5)


def _site(make_inventory: InventoryFactory) -> Site:
    hosts = copy.deepcopy(BASE_HOSTS)
    children = hosts["all"]["children"]
    children["consul_servers"] = {"hosts": {"c1": {"ansible_host": AGENTS["c1"]},
                                            "c2": {"ansible_host": AGENTS["c2"]}}}
    children["rgw"] = {"hosts": {"rgw1": {"ansible_host": AGENTS["rgw1"]}}}
    return open_site(str(make_inventory(hosts, all={
        "deploykit_dns_mode": "consul", "consul_tls_enabled": True,
        "consul_acl_enabled": False, "consul_raft_multiplier": 1,
        "consul_check_interval": "1s", "consul_check_timeout": "1s"})))


def _conf(agent: dict[str, Any], address: str, conf: Path, ports: dict[str, int],
          http: int, ca_pem: bytes, agent_pem: bytes, key: str) -> None:
    """The rendered agent, moved onto its own loopback address, ports and files."""
    (conf / "tls").mkdir(parents=True)
    (conf / "tls" / "ca.pem").write_bytes(ca_pem)
    pem = conf / "tls" / "agent.pem"
    pem.write_bytes(agent_pem)
    pem.chmod(0o600)
    defaults = agent["tls"]["defaults"]
    defaults["ca_file"] = str(conf / "tls" / "ca.pem")
    defaults["cert_file"] = defaults["key_file"] = str(pem)
    agent.update(data_dir=str(conf.parent / f"{conf.name}-data"), bind_addr=address,
                 client_addr=address,
                 addresses={"dns": address}, encrypt=key,
                 retry_join=[f"{AGENTS[s]}:{ports['serf_lan']}" for s in ("c1", "c2")])
    agent["ports"].update(http=http, dns=-1, grpc=-1, **ports)
    (conf / "consul.json").write_text(json.dumps(agent))


@pytest.fixture
def cluster(make_inventory: InventoryFactory, consul_bin: Path, tmp_path: Path
            ) -> Iterator[dict[str, Any]]:
    site = _site(make_inventory)
    issued = consul_tls.ensure_consul_tls(site)
    assert [i.host for i in issued] == ["c1", "c2", "rgw1"]
    tree = render_site(site)
    tls_dir = site.root / ".deploykit-tls"
    ca_pem = (tls_dir / "consul-ca.crt").read_bytes()
    # the rogue: its own CA (same subject name, same constraints), a client certificate of
    # the right name from it, and the gossip key the site uses
    other_cert, other_key = tls.create_ca(site.name, constraints=consul_tls.ca_constraints(),
                                          kind="Consul CA")
    (tmp_path / "other-ca.key").write_bytes(other_key)
    (tmp_path / "other-ca.key").chmod(0o600)
    (tmp_path / "other-ca.crt").write_bytes(other_cert)
    other = tls.load_ca(tmp_path / "other-ca.crt", tmp_path / "other-ca.key")
    rogue_cert, rogue_key = tls.issue(other, ["client.dc1.consul"], [], 30, client_auth=True)
    key = base64.b64encode(os.urandom(32)).decode()
    ports = {"serf_lan": free_port(), "serf_wan": free_port(), "server": free_port()}
    http = {name: free_port() for name in AGENTS}
    procs: dict[str, subprocess.Popen[bytes]] = {}
    logs: dict[str, Path] = {}
    try:
        for name in AGENTS:
            source = "rgw1" if name == "rogue" else name
            agent = json.loads(tree[source]["/etc/consul.d/consul.json"].content)
            agent["node_name"] = name
            conf = tmp_path / name
            material = (other_cert, rogue_cert + rogue_key) if name == "rogue" else \
                (ca_pem, (tls_dir / "consul" / f"{name}.pem").read_bytes())
            _conf(agent, AGENTS[name], conf, ports, http[name], *material, key)
            service = json.loads(tree["rgw1"]["/etc/consul.d/s3-service.json"].content)
            if name in ("rgw1", "rogue"):  # the rogue offers its own s3 address
                service["service"]["id"] = f"s3-{name}"
                service["service"]["address"] = AGENTS[name]
                service["service"]["checks"] = []
                (conf / "s3-service.json").write_text(json.dumps(service))
            logs[name] = tmp_path / f"{name}.log"
            with logs[name].open("wb") as log:
                procs[name] = subprocess.Popen([str(consul_bin), "agent", "-config-dir",
                                                str(conf)], stdout=log,
                                               stderr=subprocess.STDOUT)
        yield {"http": http, "procs": procs, "logs": logs}
    finally:
        for proc in procs.values():
            proc.terminate()
        for proc in procs.values():
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)


def test_tls_agents_form_a_cluster_and_a_foreign_ca_is_refused(cluster: dict[str, Any]
                                                               ) -> None:
    http, logs = cluster["http"], cluster["logs"]
    start = time.monotonic()

    def alive() -> None:
        for name, proc in cluster["procs"].items():
            assert proc.poll() is None, f"{name} exited: {logs[name].read_text()[-3000:]}"

    def leader(name: str) -> bool:
        alive()
        status, body = get(http[name], AGENTS[name], "/v1/status/leader")
        return status == 200 and bool(body)

    wait_for("a leader among the TLS servers", lambda: leader("c1"))
    elected = time.monotonic() - start
    status, peers = get(http["c1"], AGENTS["c1"], "/v1/status/peers")
    assert status == 200 and len(peers) == 2, peers  # raft between servers over TLS
    # the client reaches the servers over mutual-TLS RPC and registers its service
    wait_for("the client's view of the leader", lambda: leader("rgw1"))

    def s3_nodes() -> list[str]:
        alive()
        status, body = get(http["c1"], AGENTS["c1"], "/v1/catalog/service/s3")
        return sorted(e["Node"] for e in body) if status == 200 else []

    wait_for("rgw1's s3 service in the catalog", lambda: "rgw1" in s3_nodes())
    # the rogue gossips with the stolen key, but every RPC fails the TLS handshake: it has
    # no leader, and its s3 address never reaches the catalog (so never DNS)
    deadline = time.monotonic() + 10  # rgw1, as old as the rogue, registered already
    while time.monotonic() < deadline:
        assert "rogue" not in s3_nodes()
        assert not leader("rogue")
        time.sleep(1)
    wait_for("the rogue's TLS failure in its log", lambda: "certificate" in
             logs["rogue"].read_text().lower(), timeout=30)
    status, body = get(http["rogue"], AGENTS["rogue"], "/v1/catalog/services")
    assert status != 200, body
    refused = next(line for line in logs["rogue"].read_text().splitlines()
                   if "certificate" in line.lower())
    print(f"\nconsul TLS: leader after {elected:.1f} s; rogue refused: ...{refused[-200:]}")
