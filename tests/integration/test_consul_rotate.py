"""Rotating Consul's gossip key and ACL tokens on a real cluster (the lab's consul build on
loopback: a server and a client agent, ACLs default-deny, gossip encrypted), through the
modules `deploykit secrets rotate gossip|consul-tokens` runs (docs/day2.md, "Rotating
secrets"): the new gossip key is installed on every member and made primary while the old
one still decrypts, then removed, and the members stay alive throughout; a new agent token
gets the old one's policies, is set on the client agent, and the old token is deleted.
No secret reaches the command lines (tests.tools.ansible_module's extra-vars file).

Run only inside the integration lock (tests/integration collide on loopback ports)."""

from __future__ import annotations

import base64
import json
import secrets
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration.test_consul_dns import free_port, wait_http
from tests.tools import ansible_module

SERVER, CLIENT = "127.0.3.1", "127.0.3.2"


def api(address: str, port: int, token: str, method: str, path: str,
        body: Any = None) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(f"http://{address}:{port}{path}", data=data,
                                     method=method, headers={"X-Consul-Token": token})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            raw = response.read()
            return response.status, json.loads(raw) if raw.strip() else None
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")


def gossip_key() -> str:
    return base64.b64encode(secrets.token_bytes(32)).decode()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    from tests.tools import require_tool

    require_tool("go")
    from deploykit_lab.consul import ensure_consul

    consul = ensure_consul()
    tmp = tmp_path_factory.mktemp("consul-rotate")
    s = {"mgmt": str(uuid.uuid4()), "agent": str(uuid.uuid4()), "gossip": gossip_key()}
    ports = {n: free_port() for n in ("http", "serf_lan", "serf_wan", "server", "dns",
                                      "client_http", "client_dns")}
    procs: list[subprocess.Popen[bytes]] = []

    def start(name: str, config: dict[str, Any]) -> subprocess.Popen[bytes]:
        (tmp / name).mkdir()
        (tmp / f"{name}.json").write_text(json.dumps(config))
        (tmp / f"{name}.json").chmod(0o600)
        proc = subprocess.Popen([str(consul), "agent", "-config-file", str(tmp / f"{name}.json")],
                                cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        procs.append(proc)
        return proc

    common = {"encrypt": s["gossip"], "encrypt_verify_incoming": True,
              "encrypt_verify_outgoing": True, "log_level": "warn"}
    try:
        server = start("server", common | {
            "node_name": "s1", "server": True, "bootstrap_expect": 1,
            "data_dir": str(tmp / "server"), "bind_addr": SERVER, "client_addr": SERVER,
            "ports": {"http": ports["http"], "serf_lan": ports["serf_lan"],
                      "serf_wan": ports["serf_wan"], "server": ports["server"],
                      "dns": ports["dns"], "grpc": -1, "grpc_tls": -1},
            "acl": {"enabled": True, "default_policy": "deny",
                    "tokens": {"initial_management": s["mgmt"], "agent": s["mgmt"]}}})
        wait_http(f"http://{SERVER}:{ports['http']}/v1/status/leader", server, "consul server")
        for _ in range(60):  # the leader made the management token
            if api(SERVER, ports["http"], s["mgmt"], "GET", "/v1/acl/token/self")[0] == 200:
                break
            time.sleep(0.5)
        status, _ = api(SERVER, ports["http"], s["mgmt"], "PUT", "/v1/acl/policy", {
            "Name": "agents", "Rules": 'node_prefix "" { policy = "write" }\n'
                                      'service_prefix "" { policy = "read" }'})
        assert status == 200
        status, _ = api(SERVER, ports["http"], s["mgmt"], "PUT", "/v1/acl/token", {
            "SecretID": s["agent"], "Description": "deploykit: agents",
            "Policies": [{"Name": "agents"}]})
        assert status == 200
        client = start("client", common | {
            "node_name": "rgw1", "data_dir": str(tmp / "client"), "bind_addr": CLIENT,
            "client_addr": CLIENT, "retry_join": [f"{SERVER}:{ports['serf_lan']}"],
            "ports": {"http": ports["client_http"], "serf_lan": ports["serf_lan"],
                      "dns": ports["client_dns"], "grpc": -1, "grpc_tls": -1},
            "acl": {"enabled": True, "default_policy": "deny",
                    "tokens": {"agent": s["agent"]}}})
        wait_http(f"http://{CLIENT}:{ports['client_http']}/v1/status/leader", client,
                  "consul client")
        cluster = {"ports": ports, "secrets": s, "tmp": tmp}
        assert wait_members(cluster, 2)
        yield cluster
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()


def wait_members(cluster: dict[str, Any], alive: int, timeout: float = 30) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status, members = api(SERVER, cluster["ports"]["http"], cluster["secrets"]["mgmt"],
                              "GET", "/v1/agent/members")
        if status == 200 and sum(1 for m in members if m["Status"] == 1) == alive:
            return True
        time.sleep(0.5)
    return False


def module(cluster: dict[str, Any], name: str, values: dict[str, str], args: dict[str, Any],
           check: bool = False, ok: bool = True, at: str = SERVER,
           port: str = "http") -> dict[str, Any]:
    """The module against the agent at `at`; the secrets through an extra-vars file."""
    tmp = cluster["tmp"] / f"vars-{uuid.uuid4().hex}"
    tmp.mkdir()
    refs = {k: "{{ " + k + " }}" for k in values}
    return ansible_module(name, {"url": f"http://{at}:{cluster['ports'][port]}", **refs,
                                 **args}, check=check, secrets=values, tmp=tmp, ok=ok)


def keyring(cluster: dict[str, Any]) -> list[dict[str, Any]]:
    status, pools = api(SERVER, cluster["ports"]["http"], cluster["secrets"]["mgmt"], "GET",
                        "/v1/operator/keyring")
    assert status == 200
    return list(pools)


def test_the_gossip_key_rolls_with_every_member_alive(cluster: dict[str, Any]) -> None:
    old, new, mgmt = cluster["secrets"]["gossip"], gossip_key(), cluster["secrets"]["mgmt"]
    planned = module(cluster, "deploykit_consul_keyring", {"token": mgmt, "key": new},
                     {"state": "used"}, check=True)
    assert planned["changed"] and all(new not in p["Keys"] for p in keyring(cluster))
    used = module(cluster, "deploykit_consul_keyring", {"token": mgmt, "key": new},
                  {"state": "used"})
    assert used["changed"] and used["members"] == {"WAN": 1, "LAN dc1": 2}, used
    for pool in keyring(cluster):  # both keys held, the new one primary on every member
        assert pool["Keys"][old] == pool["Keys"][new] == pool["NumNodes"]
        assert pool["PrimaryKeys"] == {new: pool["NumNodes"]}
    assert wait_members(cluster, 2)
    again = module(cluster, "deploykit_consul_keyring", {"token": mgmt, "key": new},
                   {"state": "used"})
    assert not again["changed"]
    pruned = module(cluster, "deploykit_consul_keyring",
                    {"token": mgmt, "key": new, "old": old}, {"state": "pruned"})
    assert pruned["changed"]
    assert all(set(p["Keys"]) == {new} for p in keyring(cluster))
    time.sleep(3)  # gossip keeps flowing with the new key alone
    assert wait_members(cluster, 2)
    assert not module(cluster, "deploykit_consul_keyring",
                      {"token": mgmt, "key": new, "old": old}, {"state": "pruned"})["changed"]


def test_a_token_is_replaced_with_the_same_rights_then_the_old_one_deleted(
        cluster: dict[str, Any]) -> None:
    s, ports = cluster["secrets"], cluster["ports"]
    new = str(uuid.uuid4())
    made = module(cluster, "deploykit_consul_token",
                  {"token": s["mgmt"], "secret": new, "like": s["agent"]}, {"state": "present"})
    assert made["changed"] and made["accessor"]
    status, old_self = api(SERVER, ports["http"], s["agent"], "GET", "/v1/acl/token/self")
    status_new, new_self = api(SERVER, ports["http"], new, "GET", "/v1/acl/token/self")
    assert status == status_new == 200  # both valid during the roll
    assert [p["Name"] for p in new_self["Policies"]] == [p["Name"] for p in old_self["Policies"]]
    assert new_self["Description"] == old_self["Description"]
    assert not module(cluster, "deploykit_consul_token",
                      {"token": s["mgmt"], "secret": new, "like": s["agent"]},
                      {"state": "present"})["changed"]
    # the client agent takes it (a restart reads its config file, which the role rewrites)
    module(cluster, "deploykit_consul_token", {"token": s["mgmt"], "secret": new},
           {"state": "agent", "agent_kind": "agent"}, at=CLIENT, port="client_http")
    gone = module(cluster, "deploykit_consul_token", {"token": s["mgmt"], "secret": s["agent"]},
                  {"state": "absent"})
    assert gone["changed"]
    assert api(SERVER, ports["http"], s["agent"], "GET", "/v1/acl/token/self")[0] == 403
    assert api(SERVER, ports["http"], new, "GET", "/v1/acl/token/self")[0] == 200
    # the client, now on the new token, still writes its own node (node:write)
    status, _ = api(CLIENT, ports["client_http"], new, "PUT", "/v1/catalog/register", {
        "Node": "rgw1", "Address": CLIENT, "NodeMeta": {"rotated": "yes"}})
    assert status == 200
    assert wait_members(cluster, 2)
    # a copy from a deleted token is refused: its rights are unknown
    refused = module(cluster, "deploykit_consul_token",
                     {"token": s["mgmt"], "secret": str(uuid.uuid4()), "like": s["agent"]},
                     {"state": "present"}, ok=False)
    assert "not valid" in refused["msg"]
