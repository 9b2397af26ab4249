"""deploykit_secrets_agree's reading of what a host runs (plugins/modules/
deploykit_secrets_agree.py), in process: the Consul secrets file's fields, the vLLM env file
as the role writes it (env_quote's inverse, byte for byte), the key list, a link never
followed; and the role task handing it every generated secret and its next value."""

from __future__ import annotations

import importlib.util
import json
import sys
import types
from pathlib import Path
from unittest import mock

import pytest
import yaml

from deploy_kit.config import site_secrets
from deploy_kit.render.templating import env_quote
from plugins.module_utils import deploykit_consul_api
from tests.conftest import REPO


def _module() -> types.ModuleType:
    name = "ansible_collections.deploykit.kvcache.plugins.module_utils.deploykit_consul_api"
    spec = importlib.util.spec_from_file_location(
        "deploykit_secrets_agree_module",
        REPO / "plugins" / "modules" / "deploykit_secrets_agree.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    with mock.patch.dict(sys.modules, {name: deploykit_consul_api}):
        spec.loader.exec_module(module)
    return module


agree = _module()


@pytest.mark.parametrize("key", ["plain-Key_0", 'q"uo`te$s\\ and space', "ünï code", "a=b#c"])
def test_the_env_file_reads_back_the_key_the_role_wrote(key: str) -> None:
    text = f"# written by deploykit\nOTHER=x\nVLLM_API_KEY={env_quote(key)}\n"
    assert agree.env_value(text, "VLLM_API_KEY") == key
    assert agree.env_value("OTHER=x\n", "VLLM_API_KEY") is None


def test_the_consul_file_names_each_secret_by_its_field() -> None:
    text = json.dumps({"acl": {"tokens": {"agent": "A", "default": "D",
                                          "config_file_service_registration": "S",
                                          "initial_management": "M"}}, "encrypt": "G"})
    assert agree.consul_file(text) == {
        "consul_acl_agent_token": "A", "consul_acl_dns_token": "D",
        "consul_acl_service_token": "S", "consul_acl_management_token": "M",
        "consul_gossip_key": "G"}
    assert agree.consul_file("not json") == {} and agree.consul_file('["x"]') == {}
    assert agree.consul_file(json.dumps({"acl": {"tokens": {"agent": ""}}})) == {}


def test_current_and_next_are_one_secret_and_empty_is_unset() -> None:
    assert agree.accepted({"vllm_api_key": "a", "vllm_api_key_next": "b",
                           "consul_gossip_key": "", "consul_acl_dns_token_next": None}) == \
        {"vllm_api_key": {"a", "b"}}


def test_files_are_compared_and_a_link_is_never_followed(tmp_path: Path) -> None:
    secrets = tmp_path / "secrets.json"
    secrets.write_text(json.dumps({"encrypt": "G1", "acl": {"tokens": {"agent": "A1"}}}))
    env = tmp_path / "vllm.env"
    env.write_text(f"VLLM_API_KEY={env_quote('K 1')}\n")
    params = {"values": {"consul_gossip_key": "G1", "consul_acl_agent_token": "A2",
                         "consul_acl_agent_token_next": "A1", "vllm_api_key": "K 2"},
              "consul_secrets": str(secrets), "vllm_env": str(env), "vllm_keys": "",
              "consul_url": ""}
    done = agree.compare(params)
    assert done["differ"] == ["vllm_api_key"] and done["confirmed"] == []
    assert done["files"] == [str(secrets), str(env)]
    none = agree.compare(params | {"consul_secrets": str(tmp_path / "absent"),
                                   "vllm_env": str(tmp_path / "absent.env")})
    assert none == {"differ": [], "confirmed": [], "files": []}  # never converged
    link = tmp_path / "link.json"
    link.symlink_to(secrets)
    with pytest.raises(OSError):
        agree.compare(params | {"consul_secrets": str(link)})


def test_the_role_hands_over_every_generated_secret_and_its_next_value() -> None:
    tasks = yaml.safe_load((REPO / "roles" / "deploykit_common" / "tasks" /
                            "secrets_agree.yml").read_text())
    flat = [t for task in tasks for t in task.get("block", [task])]
    call = next(t for t in flat if "deploykit.kvcache.deploykit_secrets_agree" in t)
    assert call["no_log"] is True
    handed = set(call["deploykit.kvcache.deploykit_secrets_agree"]["values"])
    assert handed == set(site_secrets.GENERATED) | set(site_secrets.NEXT.values())
    # the names the module reads from the Consul file are generated secrets
    assert set(agree.CONSUL_FIELDS.values()) <= set(site_secrets.GENERATED)
    rotate = yaml.safe_load((REPO / "roles" / "deploykit_common" / "vars" / "main.yml")
                            .read_text())["__deploykit_common_rotate"]
    assert set(rotate) == set(site_secrets.GENERATED)  # every refusal names its way out
