"""Rotating the Consul tokens on the lab (docs/day2.md, "Rotating secrets"), and what a
plain `up` does while a rotation is open: it installs the next tokens (created in Consul if
missing) in every agent's secrets file, never the old ones; the rotation then finishes, the
store holds the new tokens before the old ones are deleted, Consul refuses the old ones, and
a converge after it changes nothing.

No token value leaves the hosts or the store: the hosts print sha256 digests of the
tokens their secrets file holds, and Consul is asked with the token in a header."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import yaml

from deploy_kit.ops import secrets_store
from deploy_kit.ops.site import open_site
from tests.lab.conftest import LAB_INVENTORY, VAULT_PASSWORD, Lab

pytestmark = pytest.mark.lab

TOKENS = ("consul_acl_agent_token", "consul_acl_service_token", "consul_acl_dns_token")
FIELDS = {"consul_acl_agent_token": "agent",
          "consul_acl_service_token": "config_file_service_registration",
          "consul_acl_dns_token": "default"}
DIGESTS = ("python3 -c 'import hashlib, json; t = json.load(open(\"/etc/consul.d/"
           "secrets.json\"))[\"acl\"][\"tokens\"]; print(json.dumps({k: hashlib.sha256("
           "v.encode()).hexdigest() for k, v in t.items()}))'")
# asks the local agent whether it accepts the token read from stdin (never in argv)
ACCEPTS = ("python3 -c 'import sys, urllib.request, urllib.error\n"
           "r = urllib.request.Request(\"http://127.0.0.1:8500/v1/acl/token/self\", "
           "headers={\"X-Consul-Token\": sys.stdin.read().strip()})\n"
           "try: print(urllib.request.urlopen(r, timeout=10).status)\n"
           "except urllib.error.HTTPError as e: print(e.code)'")


def _agents() -> dict[str, str]:
    children = yaml.safe_load((LAB_INVENTORY / "hosts.yml").read_text())["all"]["children"]
    found: dict[str, str] = {}
    for group in ("consul_servers", "rgw"):
        for name, values in ((children.get(group) or {}).get("hosts") or {}).items():
            found[name] = (values or {}).get("ansible_host", name)
    return found


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def _held(lab: Lab) -> dict[str, dict[str, str]]:
    return {name: json.loads(lab.ssh(address, DIGESTS)) for name, address in _agents().items()}


def _accepted(lab: Lab, token: str) -> bool:
    address = next(iter(_agents().values()))
    return lab.ssh(address, ACCEPTS, stdin=token).strip() == "200"


def test_an_open_rotation_is_installed_by_a_plain_up_and_finished_by_the_rotation(
        converged: Lab) -> None:
    site = open_site(str(LAB_INVENTORY), Path(VAULT_PASSWORD))  # the lab's vault file
    before = secrets_store.read_store(site)
    # the serving profile leaves the tokens to deploykit: generated into the vault file
    assert all(name in before for name in TOKENS), sorted(before)
    for name in TOKENS:  # a rotation left open: the next tokens stored, none made yet
        secrets_store.begin_rotation(site, name)
    opened = secrets_store.read_store(site)
    summary = converged.converge()
    assert summary["rc"] == 0 and not summary["failed"], summary["failed"]
    for name, held in _held(converged).items():
        for token in TOKENS:
            assert held[FIELDS[token]] == _digest(opened[f"{token}_next"]), (name, token)
    assert all(_accepted(converged, opened[f"{t}_next"]) for t in TOKENS)
    assert all(_accepted(converged, before[t]) for t in TOKENS)  # the old ones still valid
    converged.deploykit("secrets", "rotate", "-i", "lab", "consul-tokens", "--yes")
    after = secrets_store.read_store(site)
    for token in TOKENS:
        assert after[token] == opened[f"{token}_next"] and f"{token}_next" not in after
        assert not _accepted(converged, before[token]), f"the old {token} is still valid"
        assert _accepted(converged, after[token])
    again = converged.converge()
    assert again["rc"] == 0 and again["changed"] == 0, again["changed_tasks"]
