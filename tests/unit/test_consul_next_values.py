"""While a Consul rotation is open (`<name>_next` stored), every run installs the next values,
a plain `up` too (docs/day2.md, "Rotating secrets"): the secrets file the consul role writes
and the token the ACL step makes sure exists, templated by Ansible itself from the role's
own expressions; with no rotation open, the current values."""

from __future__ import annotations

from functools import cache
from typing import Any

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.plugins.loader import init_plugin_loader
from ansible.template import Templar, trust_as_template

from tests.conftest import REPO

TASKS = REPO / "roles" / "consul" / "tasks"
CURRENT = {"consul_acl_agent_token": "A", "consul_acl_service_token": "S",
           "consul_acl_dns_token": "D", "consul_acl_management_token": "M",
           "consul_gossip_key": "G"}
NEXT = {"consul_acl_agent_token_next": "A2", "consul_acl_service_token_next": "S2",
        "consul_acl_dns_token_next": "D2", "consul_gossip_key_next": "G2"}


@cache
def _plugins() -> None:
    init_plugin_loader()  # the lookups (ansible.builtin.vars) the expressions call


def _template(expression: str, variables: dict[str, Any]) -> Any:
    _plugins()
    return Templar(loader=DataLoader(), variables=variables).template(
        trust_as_template(expression))


def _secrets_file(values: dict[str, str], **more: Any) -> Any:
    task = yaml.safe_load((TASKS / "secrets_file.yml").read_text())[0]
    variables = {**values, "consul_acl_enabled": True, "consul_gossip_encryption": True,
                 "inventory_hostname": "c1", "groups": {"consul_servers": ["c1"]},
                 "__consul_tokens": trust_as_template(task["vars"]["__consul_tokens"]), **more}
    return _template(task["vars"]["__consul_secrets"], variables)


@pytest.mark.parametrize("run", [{}, {"deploykit_rotate_consul": "tokens"},
                                 {"deploykit_rotate_consul": "gossip"}])
def test_the_secrets_file_takes_an_open_rotations_next_values_in_every_run(
        run: dict[str, str]) -> None:
    assert _secrets_file(CURRENT | NEXT, **run) == {
        "acl": {"tokens": {"agent": "A2", "config_file_service_registration": "S2",
                           "default": "D2", "initial_management": "M"}}, "encrypt": "G2"}
    assert _secrets_file(CURRENT, **run) == {
        "acl": {"tokens": {"agent": "A", "config_file_service_registration": "S",
                           "default": "D", "initial_management": "M"}}, "encrypt": "G"}


def test_the_acl_step_makes_sure_the_next_token_exists_never_the_old_one() -> None:
    tasks = yaml.safe_load((TASKS / "acl.yml").read_text())
    create = next(t for t in tasks if t["name"] == "Create the missing ACL tokens")
    secret = create["ansible.builtin.uri"]["body"]["SecretID"]
    item = {"item": {"var": "consul_acl_agent_token"}}
    assert _template(secret, {**CURRENT, **NEXT, "item": item}) == "A2"
    assert _template(secret, {**CURRENT, "item": item}) == "A"
    look = next(t for t in tasks if t["name"] == "Look up the deploykit ACL tokens by their secret")
    header = look["ansible.builtin.uri"]["headers"]["X-Consul-Token"]
    one = {"var": "consul_acl_dns_token"}
    assert _template(header, {**CURRENT, **NEXT, "item": one}) == "D2"
    assert _template(header, {**CURRENT, "item": one}) == "D"
