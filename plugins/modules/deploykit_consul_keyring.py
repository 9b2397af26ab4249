#!/usr/bin/python
"""Roll Consul's gossip encryption key across the cluster through the keyring API."""

from __future__ import annotations

from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.deploykit.kvcache.plugins.module_utils.deploykit_consul_api import call

DOCUMENTATION = r"""
module: deploykit_consul_keyring
short_description: Install and use a new gossip key on every Consul member, or remove the old
description: >-
  What `consul keyring -install/-use/-remove` do, through this agent's HTTP API with a token
  that may write the operator API (the management token). state used - installs key on
  every member (WAN and LAN pools), checks every member holds it, then makes it the primary
  key everywhere: the old key still decrypts, so members that have not switched yet are
  still heard. state pruned - removes old from every member (after used). A member that
  cannot be reached fails the task (its count is short): nothing is removed then. Keys are
  never returned; use no_log on the task.
options:
  url: {type: str, default: "http://127.0.0.1:8500", description: this agent's HTTP API}
  token: {type: str, required: true, no_log: true, description: operator-write ACL token}
  key: {type: str, required: true, no_log: true, description: the new gossip key (base64)}
  old: {type: str, default: "", no_log: true, description: "pruned: the key to remove"}
  state: {type: str, default: used, choices: [used, pruned], description: step}
author: deploykit
"""

EXAMPLES = r"""
- name: Make the new gossip key the primary one on every member
  deploykit_consul_keyring: {token: "{{ mgmt }}", key: "{{ next }}", state: used}
  no_log: true
"""

RETURN = r"""
members: {description: "the members of each pool (LAN/WAN) that hold the new key", type: dict}
"""


def pools(module: AnsibleModule, url: str, token: str) -> list[dict[str, Any]]:
    status, body = call(url, token, "GET", "/v1/operator/keyring")
    if status != 200 or not isinstance(body, list):
        module.fail_json(msg=f"reading the keyring failed (HTTP {status}): {body}")
    return body


def name(pool: dict[str, Any]) -> str:
    return "WAN" if pool.get("WAN") else f"LAN {pool.get('Datacenter', '')}".strip()


def short(pool: dict[str, Any], table: str, key: str) -> bool:
    """Whether some member of the pool lacks `key` in `table` (Keys or PrimaryKeys)."""
    counts = pool.get(table)
    if counts is None:  # an older Consul without PrimaryKeys: Keys is all there is
        return False
    return int(counts.get(key, 0)) < int(pool.get("NumNodes", 0))


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "url": {"type": "str", "default": "http://127.0.0.1:8500"},
            "token": {"type": "str", "required": True, "no_log": True},
            "key": {"type": "str", "required": True, "no_log": True},
            "old": {"type": "str", "default": "", "no_log": True},
            "state": {"type": "str", "default": "used", "choices": ["used", "pruned"]},
        },
        supports_check_mode=True,
    )
    p = module.params
    url, token, key = p["url"], p["token"], p["key"]
    changed = False

    def act(method: str, what: str, value: str) -> None:
        status, body = call(url, token, method, "/v1/operator/keyring", {"Key": value})
        if status != 200:
            module.fail_json(msg=f"{what} failed (HTTP {status}): {body}")

    if p["state"] == "used":
        if any(short(pool, "Keys", key) for pool in pools(module, url, token)):
            changed = True
            if not module.check_mode:
                act("POST", "installing the new key", key)
        if not module.check_mode:
            lacking = [f"{name(pool)}: {pool.get('Keys', {}).get(key, 0)} of "
                       f"{pool.get('NumNodes')} members" for pool in pools(module, url, token)
                       if short(pool, "Keys", key)]
            if lacking:
                module.fail_json(msg="the new key is not on every member (" + "; ".join(lacking)
                                 + "): a member is down or unreachable; the old key stays "
                                   "in use. Bring it back and re-run.")
        current = pools(module, url, token) if not module.check_mode else []
        if module.check_mode or any(short(pool, "PrimaryKeys", key) or
                                    "PrimaryKeys" not in pool for pool in current):
            changed = True
            if not module.check_mode:
                act("PUT", "using the new key", key)
    elif p["old"] and p["old"] != key and any(
            p["old"] in pool.get("Keys", {}) for pool in pools(module, url, token)):
        changed = True
        if not module.check_mode:
            act("DELETE", "removing the old key", p["old"])
    members = {} if module.check_mode else {
        name(pool): int(pool.get("Keys", {}).get(key, 0)) for pool in pools(module, url, token)}
    module.exit_json(changed=changed, members=members)


if __name__ == "__main__":
    main()
