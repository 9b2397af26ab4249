"""Consul with ACLs (default deny) and gossip encryption from the lab's first converge
(`lab up --profile secured`): the tokens and the gossip key come from a vault file, the role
creates the policies and tokens, DNS keeps answering through the default (read-only) token,
anonymous writes and secret reads are refused, verify reads Consul with the DNS token, and a
stopped gateway still leaves DNS within the bound."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO
from tests.lab.conftest import VAULT_PASSWORD, Lab, runs_dirs
from tests.lab.failover.test_consul_failover import RGW, bound_s, verify, wait_dns

pytestmark = pytest.mark.lab

SERVER = "10.99.0.13"


def api(path: str, token: str | None = None) -> tuple[int, object]:
    request = urllib.request.Request(f"http://{SERVER}:8500{path}")
    if token:
        request.add_header("X-Consul-Token", token)
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")


@pytest.fixture(scope="module")
def secured(converged: Lab) -> dict[str, str]:
    """The secrets `lab up --profile secured` vaulted (decrypted with the lab's password)."""
    from ansible.parsing.vault import VaultLib, VaultSecret

    password = Path(VAULT_PASSWORD).read_text().strip().encode()
    vault = REPO / "inventory/lab/group_vars/all/vault.yml"
    assert oct(vault.stat().st_mode & 0o777) == "0o600"
    text = VaultLib([("default", VaultSecret(password))]).decrypt(vault.read_text())
    secrets: dict[str, str] = yaml.safe_load(text)
    assert set(secrets) >= {"consul_acl_management_token", "consul_gossip_key"}
    return secrets


def test_acl_default_deny_refuses_anonymous_writes_and_secrets(
        secured: dict[str, str]) -> None:
    # Consul 1.16 answers DNS with the default token, so anonymous *reads* of nodes and
    # services are what the DNS policy allows; anything else is denied.
    for path in ("/v1/acl/tokens",):  # a missing KV key answers 404, not 403
        status, body = api(path)
        assert status == 403, (path, status, body)
    request = urllib.request.Request(f"http://{SERVER}:8500/v1/agent/service/register",
                                     data=b'{"Name": "intruder"}', method="PUT")
    try:
        urllib.request.urlopen(request, timeout=5)
        pytest.fail("anonymous service registration was accepted")
    except urllib.error.HTTPError as exc:
        assert exc.code == 403
    status, seen = api("/v1/health/service/s3?passing=1", secured["consul_acl_dns_token"])
    assert status == 200 and isinstance(seen, list)
    assert sorted(e["Service"]["Address"] for e in seen) == sorted(RGW.values())
    status, me = api("/v1/agent/self", secured["consul_acl_management_token"])
    assert status == 200 and isinstance(me, dict)
    assert me["Stats"]["serf_lan"]["encrypted"] == "true"


def test_secrets_file_is_private_and_tokens_never_logged(converged: Lab,
                                                         secured: dict[str, str]) -> None:
    for address in RGW.values():
        mode = converged.ssh(address, "stat -c '%a %U' /etc/consul.d/secrets.json").split()
        assert mode == ["600", "consul"]
    for text in converged.outputs:
        for secret in secured.values():
            assert secret not in text
    for path in (p for d in runs_dirs() for p in d.rglob("*") if p.is_file()):
        data = path.read_bytes()
        for secret in secured.values():
            assert secret.encode() not in data, path


def test_dns_verify_and_failover_work_under_acls(converged: Lab,
                                                 secured: dict[str, str]) -> None:
    assert wait_dns(list(RGW.values()), set(RGW.values()), 60) >= 0
    deadline = time.monotonic() + 60
    while True:
        rc, findings = verify(converged)
        if rc == 0 or time.monotonic() > deadline:
            break
        time.sleep(2)
    assert rc == 0, {k: [f for f in v if f["status"] == "fail"] for k, v in findings.items()}
    assert {f["status"] for f in findings["consul-service-health"]} == {"pass"}
    dead, live = RGW["lab2"], RGW["lab1"]
    converged.ssh(dead, "systemctl stop haproxy")
    gone = wait_dns(list(RGW.values()), {live}, bound_s() + 10)
    converged.ssh(dead, "systemctl start haproxy")
    wait_dns(list(RGW.values()), set(RGW.values()), bound_s() + 30)
    print(f"\nfailover under ACLs + gossip encryption: left DNS {gone:.2f} s")
    assert gone <= bound_s()
