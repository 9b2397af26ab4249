#!/usr/bin/python
"""Whether the secrets a run would install are the ones this host runs today: read-only,
before any task changes a host (roles/deploykit_common/tasks/secrets_agree.yml)."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.deploykit.kvcache.plugins.module_utils.deploykit_consul_api import call

DOCUMENTATION = r"""
module: deploykit_secrets_agree
short_description: Compare the secrets a run holds with what the host runs, by name only
description: >-
  values gives each secret the run would install (name: value, and name_next for a
  rotation under way: either is accepted). The module reads the Consul secrets file
  (acl.tokens.*, encrypt), the vLLM key env file (VLLM_API_KEY), vLLM's key list
  (api-key) and the LMCache L2 master key file, and, given consul_url, asks Consul
  whether it accepts the management token (GET /v1/acl/token/self) and, if it does, each
  other token and which gossip keys its keyring holds. A file that is missing is a host
  never converged: nothing to compare. Returns names only, never a value; reads only
  (never changed, check mode too).
options:
  values: {type: dict, required: true, no_log: true, description: "name: value ('' unset)"}
  consul_secrets: {type: str, default: "", description: the Consul secrets file ('' none)}
  vllm_env: {type: str, default: "", description: the VLLM_API_KEY env file ('' none)}
  vllm_keys: {type: str, default: "", description: "vLLM's --config key list ('' none)"}
  l2_key: {type: str, default: "", description: "the LMCache L2 master key file ('' none)"}
  consul_url: {type: str, default: "", description: "a server's HTTP API ('' no API check)"}
author: deploykit
"""

RETURN = r"""
differ: {description: secrets whose running value is not one the run holds, type: list}
confirmed: {description: secrets Consul's API accepts (they win over a stale file), type: list}
files: {description: the files found (the host was converged), type: list}
"""

# where each secret sits in the Consul secrets file (roles/consul/tasks/secrets_file.yml)
CONSUL_FIELDS = {("acl", "tokens", "agent"): "consul_acl_agent_token",
                 ("acl", "tokens", "config_file_service_registration"):
                     "consul_acl_service_token",
                 ("acl", "tokens", "default"): "consul_acl_dns_token",
                 ("acl", "tokens", "initial_management"): "consul_acl_management_token",
                 ("encrypt",): "consul_gossip_key"}
MAX_FILE = 65536
_ESCAPED = re.compile(r"\\(.)")


def accepted(values: dict[str, Any]) -> dict[str, set[str]]:
    """Each secret's accepted values: its own and, during a rotation, its next one."""
    out: dict[str, set[str]] = {}
    for key, value in values.items():
        if value in (None, ""):
            continue
        name = key.removesuffix("_next")
        out.setdefault(name, set()).add(str(value))
    return out


def read(path: str) -> str | None:
    """The file's text; None when there is none (a host never converged)."""
    if not path:
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    with os.fdopen(fd, "rb") as handle:
        return handle.read(MAX_FILE).decode("utf-8", errors="replace")


def consul_file(text: str) -> dict[str, str]:
    """The secrets a Consul secrets file names; {} when it cannot be read as one."""
    try:
        data = json.loads(text)
    except ValueError:
        return {}
    found: dict[str, str] = {}
    for path, name in CONSUL_FIELDS.items():
        node: Any = data
        for part in path:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, str) and node:
            found[name] = node
    return found


def env_value(text: str, key: str) -> str | None:
    """A value of a systemd EnvironmentFile as the role writes it (env_quote's inverse)."""
    for line in text.splitlines():
        name, sep, value = line.partition("=")
        if sep and name.strip() == key:
            value = value.strip()
            if len(value) >= 2 and value[0] == value[-1] == '"':
                value = _ESCAPED.sub(r"\1", value[1:-1])
            return value
    return None


def vllm_keys(text: str | None) -> set[str]:
    try:
        keys = json.loads(text or "{}").get("api-key", [])
    except (ValueError, AttributeError):
        return set()
    return {k for k in keys if isinstance(k, str)} if isinstance(keys, list) else set()


def _first_ok(url: str, tokens: Iterable[str]) -> tuple[str | None, set[int]]:
    """The first token Consul accepts, and every status it answered."""
    seen: set[int] = set()
    for token in sorted(tokens):
        status, _ = call(url, token, "GET", "/v1/acl/token/self")
        if status == 200:
            return token, seen | {200}
        seen.add(status)
    return None, seen


def consul_api(url: str, want: dict[str, set[str]]) -> tuple[set[str], set[str]]:
    """(confirmed, refused) by the running Consul. Only a Consul that answers decides: one
    down, without a leader, or with ACLs off says nothing (the files decide)."""
    mgmt_name = "consul_acl_management_token"
    confirmed: set[str] = set()
    mgmt = ""
    found, statuses = _first_ok(url, want.get(mgmt_name, set()))
    if found is None and 403 in statuses:
        # 403 "ACL not found": ACLs bootstrapped with another management token
        return set(), {mgmt_name}
    if found is not None:  # else ACLs off (401), or no answer: the tokens say nothing
        mgmt = found
        confirmed.add(mgmt_name)
        for name in ("consul_acl_agent_token", "consul_acl_service_token",
                     "consul_acl_dns_token"):
            if name in want and _first_ok(url, want[name])[0] is not None:
                confirmed.add(name)
    refused: set[str] = set()
    if "consul_gossip_key" in want:  # with ACLs off, the keyring needs no token
        status, rings = call(url, mgmt, "GET", "/v1/operator/keyring")
        keys = {k for ring in rings if isinstance(ring, dict) and not ring.get("WAN")
                for k in (ring.get("Keys") or {})} if status == 200 and \
            isinstance(rings, list) else set()
        if keys & want["consul_gossip_key"]:
            confirmed.add("consul_gossip_key")
        elif keys:  # the cluster's keyring holds none of the run's keys
            refused.add("consul_gossip_key")
    return confirmed, refused


def compare(params: dict[str, Any]) -> dict[str, Any]:
    want = accepted(params["values"])
    differ: set[str] = set()
    files: list[str] = []
    text = read(params["consul_secrets"])
    if text is not None:
        files.append(params["consul_secrets"])
        differ |= {name for name, value in consul_file(text).items()
                   if name in want and value not in want[name]}
    env, keys = read(params["vllm_env"]), read(params["vllm_keys"])
    if env is not None and "vllm_api_key" in want:
        files.append(params["vllm_env"])
        running = {v for v in [env_value(env, "VLLM_API_KEY")] if v} | vllm_keys(keys)
        if running and not running & want["vllm_api_key"]:
            differ.add("vllm_api_key")
    key = read(params.get("l2_key", ""))
    if key is not None and "lmcache_l2_master_key" in want:
        files.append(params["l2_key"])
        # a host holding another master key cannot read the chunks the others store
        if key.strip() not in want["lmcache_l2_master_key"]:
            differ.add("lmcache_l2_master_key")
    confirmed: set[str] = set()
    if params["consul_url"]:
        confirmed, refused = consul_api(params["consul_url"], want)
        differ = (differ - confirmed) | refused
    return {"differ": sorted(differ), "confirmed": sorted(confirmed), "files": files}


def main() -> None:
    module = AnsibleModule(
        argument_spec={"values": {"type": "dict", "required": True, "no_log": True},
                       "consul_secrets": {"type": "str", "default": ""},
                       "vllm_env": {"type": "str", "default": ""},
                       "vllm_keys": {"type": "str", "default": ""},
                       "l2_key": {"type": "str", "default": ""},
                       "consul_url": {"type": "str", "default": ""}},
        supports_check_mode=True)
    try:
        module.exit_json(changed=False, **compare(module.params))
    except OSError as exc:  # a file there but unreadable: say which, never its content
        module.fail_json(msg=f"cannot read {exc.filename}: {exc.strerror}")


if __name__ == "__main__":
    main()
