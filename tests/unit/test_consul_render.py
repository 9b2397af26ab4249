"""Consul rendering options: failover timing, ACLs and gossip encryption, and the
rule that checks their secrets' shape. Secrets never reach a rendered file."""

from __future__ import annotations

import base64
import json
import uuid

import pytest

from deploy_kit.core.errors import InventoryError
from deploy_kit.ops.site import open_site
from deploy_kit.render import consul
from deploy_kit.render.files import render_site, write_tree
from tests.conftest import InventoryFactory

TOKENS = {k: str(uuid.uuid4()) for k in ("consul_acl_management_token", "consul_acl_agent_token",
                                          "consul_acl_service_token", "consul_acl_dns_token")}
KEY = base64.b64encode(bytes(range(32))).decode()


def secure_site(make_inventory: InventoryFactory, **vault: str):  # type: ignore[no-untyped-def]
    vault_text = "\n".join(f"{k}: {json.dumps(v)}" for k, v in {**TOKENS, "consul_gossip_key": KEY,
                                                               **vault}.items())
    from ansible.parsing.vault import VaultLib, VaultSecret

    encrypted = VaultLib([("default", VaultSecret(b"pw"))]).encrypt(vault_text).decode()
    root = make_inventory(files={"group_vars/all/vault.yml": encrypted}, all={
        "deploykit_dns_mode": "consul", "consul_acl_enabled": True,
        "consul_gossip_encryption": True, "consul_check_interval": "1s",
        "consul_raft_multiplier": 1, "consul_retry_interval": "2s"})
    password = root / "vault-password"
    password.write_text("pw\n")
    return open_site(str(root), password)


def test_options_render_into_the_agent_config_without_secrets(make_inventory, tmp_path) -> None:  # type: ignore[no-untyped-def]
    site = secure_site(make_inventory)
    tree = render_site(site)
    server = json.loads(tree["c1"]["/etc/consul.d/consul.json"].content)
    assert server["acl"] == {"enabled": True, "default_policy": "deny",
                             "down_policy": "extend-cache", "enable_token_persistence": False}
    assert server["performance"] == {"raft_multiplier": 1}
    assert server["retry_interval"] == "2s" and server["encrypt_verify_incoming"] is True
    service = json.loads(tree["rgw1"]["/etc/consul.d/s3-service.json"].content)
    assert service["service"]["checks"][0]["interval"] == "1s"
    plan = json.loads(tree["_cluster"]["consul/acl.json"].content)
    assert {p["Name"] for p in plan["policies"]} == {"deploykit-agent", "deploykit-dns",
                                                      "deploykit-service-s3"}
    assert [t["var"] for t in plan["tokens"]] == ["consul_acl_agent_token",
                                                  "consul_acl_service_token",
                                                  "consul_acl_dns_token"]
    write_tree(tree, tmp_path / "out")
    written = b"".join(p.read_bytes() for p in (tmp_path / "out").rglob("*") if p.is_file())
    for secret in [*TOKENS.values(), KEY]:
        assert secret.encode() not in written


def test_malformed_secrets_are_refused(make_inventory) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InventoryError) as err:
        secure_site(make_inventory, consul_acl_agent_token="not-a-uuid",
                    consul_gossip_key="c2hvcnQ=")
    assert {p.key for p in err.value.problems} == {"consul_acl_agent_token",
                                                   "consul_gossip_key"}


def test_inline_consul_secret_is_refused(make_inventory) -> None:  # type: ignore[no-untyped-def]
    root = make_inventory(all={"deploykit_dns_mode": "consul", "consul_acl_enabled": True,
                               "consul_acl_agent_token": TOKENS["consul_acl_agent_token"]})
    with pytest.raises(InventoryError) as err:
        open_site(str(root))
    assert any(p.key == "consul_acl_agent_token" and "inline" in p.message
               for p in err.value.problems)


@pytest.mark.parametrize(("opened", "client_addr"), [
    (None, "127.0.0.1"),                     # the default: loopback only
    ("0.0.0.0", "0.0.0.0"),                  # every address, loopback included
    ("10.0.0.21", "127.0.0.1 10.0.0.21"),    # one address: loopback kept for roles and verify
])
def test_the_http_api_always_answers_on_loopback(make_inventory, opened, client_addr) -> None:  # type: ignore[no-untyped-def]
    # c1's own address on c1 (a Consul agent binds only addresses it has: validate refuses
    # another host's)
    site = open_site(str(make_inventory(consul_servers={} if opened is None else
                                        {"consul_http_address": opened})))
    agent = consul.agent_config(site, site.hosts["c1"])
    assert agent["client_addr"] == client_addr
    assert agent["addresses"]["dns"] == "127.0.0.1 10.0.0.21"
