#!/usr/bin/python
"""Replace a Consul ACL token: create its successor with the same rights, set it on an agent,
delete the old one."""

from __future__ import annotations

from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.deploykit.kvcache.plugins.module_utils.deploykit_consul_api import call

DOCUMENTATION = r"""
module: deploykit_consul_token
short_description: Create, set on this agent, or delete a Consul ACL token by its secret
description: >-
  Through this agent's HTTP API with the management token. state present - a token whose
  SecretID is secret exists, with the policies, roles, identities and description of the
  token whose SecretID is like (created if missing: both are valid then). state agent -
  this agent uses secret as its agent_kind token from now on (PUT /v1/agent/token; a
  restart reads the config file instead, which the role rewrites). state absent - the
  token whose SecretID is secret is deleted. Secrets are never returned; use no_log.
options:
  url: {type: str, default: "http://127.0.0.1:8500", description: this agent's HTTP API}
  token: {type: str, required: true, no_log: true, description: the management token}
  secret: {type: str, required: true, no_log: true, description: the token's SecretID}
  like: {type: str, default: "", no_log: true, description: "present: the token to copy"}
  agent_kind:
    type: str
    default: agent
    choices: [agent, default, config_file_service_registration, replication]
    description: "agent: which of the agent's tokens"
  state: {type: str, default: present, choices: [present, agent, absent], description: step}
author: deploykit
"""

EXAMPLES = r"""
- name: Create the new agent token with the old one's policies
  deploykit_consul_token: {token: "{{ mgmt }}", secret: "{{ new }}", like: "{{ old }}"}
  no_log: true
"""

RETURN = r"""
accessor: {description: "the token's AccessorID (not a secret)", type: str}
"""

COPIED = ("Description", "Policies", "Roles", "ServiceIdentities", "NodeIdentities", "Local")


def lookup(url: str, secret: str) -> dict[str, Any] | None:
    status, body = call(url, secret, "GET", "/v1/acl/token/self")
    return body if status == 200 and isinstance(body, dict) else None


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "url": {"type": "str", "default": "http://127.0.0.1:8500"},
            "token": {"type": "str", "required": True, "no_log": True},
            "secret": {"type": "str", "required": True, "no_log": True},
            "like": {"type": "str", "default": "", "no_log": True},
            "agent_kind": {"type": "str", "default": "agent",
                           "choices": ["agent", "default", "config_file_service_registration",
                                       "replication"]},
            "state": {"type": "str", "default": "present",
                      "choices": ["present", "agent", "absent"]},
        },
        supports_check_mode=True,
    )
    p = module.params
    url, mgmt, secret = p["url"], p["token"], p["secret"]
    found = lookup(url, secret)
    if p["state"] == "present":
        if found is not None:
            module.exit_json(changed=False, accessor=found.get("AccessorID", ""))
        model = lookup(url, p["like"]) if p["like"] else None
        if model is None:
            module.fail_json(msg="the token to copy is not valid in Consul (deleted already?): "
                                 "cannot tell which rights the new one needs")
        if module.check_mode:
            module.exit_json(changed=True, accessor="")
        body = {k: model[k] for k in COPIED if model.get(k)} | {"SecretID": secret}
        status, made = call(url, mgmt, "PUT", "/v1/acl/token", body)
        if status != 200 or not isinstance(made, dict):
            module.fail_json(msg=f"creating the token failed (HTTP {status}): {made}")
        module.exit_json(changed=True, accessor=made.get("AccessorID", ""))
    if p["state"] == "agent":
        if found is None:
            module.fail_json(msg="the token to set is not valid in Consul: create it first")
        if not module.check_mode:
            status, body = call(url, mgmt, "PUT", f"/v1/agent/token/{p['agent_kind']}",
                                {"Token": secret})
            if status != 200:
                module.fail_json(msg=f"setting the agent's {p['agent_kind']} token failed "
                                     f"(HTTP {status}): {body}")
        # the agent does not tell which token it holds: setting it again is harmless
        module.exit_json(changed=True, accessor=found.get("AccessorID", ""))
    if found is None:
        module.exit_json(changed=False, accessor="")
    if not module.check_mode:
        status, body = call(url, mgmt, "DELETE", f"/v1/acl/token/{found['AccessorID']}")
        if status != 200:
            module.fail_json(msg=f"deleting the old token failed (HTTP {status}): {body}")
    module.exit_json(changed=True, accessor=found.get("AccessorID", ""))


if __name__ == "__main__":
    main()
