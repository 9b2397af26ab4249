#!/usr/bin/python
"""Read, add or prune the S3 keys of an RGW user deploykit owns (key rotation)."""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.deploykit.kvcache.plugins.module_utils.deploykit_rgw_keys import (
    current_key,
    new_access_key,
    s3_keys,
)

DOCUMENTATION = r"""
module: deploykit_rgw_key
short_description: The current S3 key of an RGW user, and the steps of rotating it
description: >-
  Runs radosgw-admin on this host (the Ceph admin host). The current key is the newest key
  deploykit added (access key DK<unix time><8 random>), else the user's first key
  (module_utils/deploykit_rgw_keys.py). state current - returns it, changes nothing.
  state added - starts a rotation: adds a new key (RGW generates its secret, so it is on
  no command line), which becomes the current one; both stay valid. If the current key is
  already deploykit's and another key remains, a rotation is under way and nothing is
  added (a re-run resumes it). state pruned - ends it: deletes every S3 key of the user
  but the current one. Keys are never logged; use no_log on the task.
options:
  uid: {type: str, required: true, description: RGW user id}
  state: {type: str, default: current, choices: [current, added, pruned], description: step}
  conf: {type: path, default: /etc/ceph/ceph.conf, description: ceph.conf on this host}
  missing_ok:
    type: bool
    default: false
    description: "a missing user returns key null (check mode on a new site)"
author: deploykit
"""

EXAMPLES = r"""
- name: Start rotating the serving identity's key
  deploykit_rgw_key: {uid: lmcache-serving, state: added}
  no_log: true
"""

RETURN = r"""
key: {description: "access_key and secret_key of the current key (null: none)", type: dict}
fingerprint: {description: "sha256 of the current access key, 12 hex digits", type: str}
others: {description: "how many other S3 keys the user holds (old ones, until pruned)", type: int}
resumed: {description: "added: a rotation was already under way, no key was added", type: bool}
removed: {description: "pruned: how many keys were deleted", type: int}
"""

ENOENT, EINVAL = 2, 22


def fingerprint(key: dict[str, str] | None) -> str:
    return hashlib.sha256(key["access_key"].encode()).hexdigest()[:12] if key else ""


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "uid": {"type": "str", "required": True},
            "state": {"type": "str", "default": "current",
                      "choices": ["current", "added", "pruned"]},
            "conf": {"type": "path", "default": "/etc/ceph/ceph.conf"},
            "missing_ok": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    uid, state = module.params["uid"], module.params["state"]
    base = ["radosgw-admin", "--conf", module.params["conf"]]

    def admin(*args: str, missing: tuple[int, ...] = ()) -> dict[str, Any] | None:
        rc, out, err = module.run_command([*base, *args])
        if rc in missing:
            return None
        if rc != 0:  # err never holds keys: radosgw-admin prints them on stdout only
            module.fail_json(msg=f"radosgw-admin {' '.join(args[:2])} failed (rc {rc}): "
                                 f"{err.strip()[-300:]}")
        return json.loads(out) if out.strip() else {}

    info = admin("user", "info", "--uid", uid, missing=(EINVAL, ENOENT))
    if info is None:
        if module.params["missing_ok"] or module.check_mode:  # check mode on a new site
            module.exit_json(changed=False, key=None, fingerprint="", others=0, resumed=False,
                             removed=0)
        module.fail_json(msg=f"RGW user {uid} does not exist: run `deploykit up` first")
    key = current_key(info, uid)
    others = [k for k in s3_keys(info, uid) if key is None or k["access_key"] != key["access_key"]]
    changed, resumed, removed = False, False, 0
    if state == "added":
        resumed = key is not None and key["access_key"].startswith("DK") and bool(others)
        if not resumed:
            changed = True
            if not module.check_mode:
                access = new_access_key(int(time.time()), info, uid)
                info = admin("key", "create", "--uid", uid, "--key-type", "s3",
                             "--access-key", access, "--gen-secret") or {}
                key = current_key(info, uid)
                if key is None or key["access_key"] != access:
                    module.fail_json(msg=f"RGW did not add the new key to {uid}")
                others = [k for k in s3_keys(info, uid) if k["access_key"] != access]
    elif state == "pruned" and key is not None:
        for old in others:
            changed, removed = True, removed + 1
            if not module.check_mode:
                admin("key", "rm", "--uid", uid, "--key-type", "s3",
                      "--access-key", old["access_key"])
        others = [] if not module.check_mode else others
    module.exit_json(changed=changed, key=key, fingerprint=fingerprint(key), others=len(others),
                     resumed=resumed, removed=removed)


if __name__ == "__main__":
    main()
