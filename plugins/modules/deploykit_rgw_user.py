#!/usr/bin/python
"""Ensure (or remove) an RGW user that deploykit owns: created with a marker in its display
name; one of that uid without the marker is neither adopted nor deleted unless asked."""

from __future__ import annotations

import json
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.deploykit.kvcache.plugins.module_utils.deploykit_rgw_keys import (
    current_key,
)

DOCUMENTATION = r"""
module: deploykit_rgw_user
short_description: Create, adopt or remove an RGW user deploykit marks as its own
description: >-
  Runs radosgw-admin on this host (the Ceph admin host). present - creates the user with
  the display name "<display_name> [<marker>]" (RGW generates its S3 keys) and returns its
  current S3 key (the newest one deploykit_rgw_key added, else the first); a user of that
  uid whose display name lacks the marker fails the task unless adopt is true (then the
  marker is added). absent - deletes the buckets listed in purge_buckets that this user
  owns, with their objects, then the user; a user without the marker (adopt false) is
  kept and reported. Keys are never logged; use no_log on the task.
options:
  uid: {type: str, required: true, description: RGW user id}
  display_name: {type: str, default: "", description: display name before the marker}
  marker: {type: str, required: true, description: "e.g. deploykit-site=<name>"}
  adopt: {type: bool, default: false, description: take over an unmarked user of this uid}
  max_buckets: {type: int, description: "RGW max-buckets (-1: the user cannot create buckets)"}
  purge_buckets: {type: list, elements: str, default: [], description: "absent: buckets to delete"}
  state: {type: str, default: present, choices: [present, absent], description: wanted state}
  conf: {type: path, default: /etc/ceph/ceph.conf, description: ceph.conf on this host}
author: deploykit
"""

EXAMPLES = r"""
- name: Ensure the serving identity
  deploykit_rgw_user: {uid: lmcache-serving, display_name: LMCache serving hosts,
                       marker: deploykit-site=prod, max_buckets: -1}
  no_log: true
"""

RETURN = r"""
keys: {description: "access_key and secret_key of the user's current S3 key (present)", type: dict}
marked: {description: whether the user carries the marker (before any change), type: bool}
kept: {description: "absent: what was left in place and why", type: list}
"""

ENOENT, EINVAL = 2, 22  # radosgw-admin's exit status for a missing bucket / user


class Admin:
    def __init__(self, module: AnsibleModule) -> None:
        self.module = module
        self.base = ["radosgw-admin", "--conf", module.params["conf"]]

    def run(self, *args: str, missing: tuple[int, ...] = ()) -> dict[str, Any] | None:
        rc, out, err = self.module.run_command([*self.base, *args])
        if rc in missing:
            return None
        if rc != 0:  # err never holds keys: radosgw-admin prints them on stdout only
            self.module.fail_json(msg=f"radosgw-admin {' '.join(args[:2])} failed (rc {rc}): "
                                      f"{err.strip()[-300:]}")
        return json.loads(out) if out.strip() else {}


def absent(module: AnsibleModule, admin: Admin, info: dict[str, Any] | None,
           marked: bool) -> None:
    p = module.params
    if info is None:
        module.exit_json(changed=False, marked=False, kept=[])
    if not marked and not p["adopt"]:
        module.exit_json(changed=False, marked=False, kept=[
            f"user {p['uid']}: display name {info.get('display_name')!r} lacks "
            f"[{p['marker']}], deploykit did not create it"])
    kept, changed = [], False
    for bucket in p["purge_buckets"]:
        stats = admin.run("bucket", "stats", "--bucket", bucket, missing=(ENOENT,))
        if stats is None:
            continue
        if stats.get("owner") != p["uid"]:
            kept.append(f"bucket {bucket}: owned by {stats.get('owner')}, not {p['uid']}")
            continue
        changed = True
        if not module.check_mode:
            admin.run("bucket", "rm", "--bucket", bucket, "--purge-objects")
    if kept:  # its bucket stays: so does the user (user rm would orphan nothing of ours)
        module.exit_json(changed=changed, marked=marked, kept=kept)
    if not module.check_mode:
        admin.run("user", "rm", "--uid", p["uid"])
    module.exit_json(changed=True, marked=marked, kept=kept)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "uid": {"type": "str", "required": True},
            "display_name": {"type": "str", "default": ""},
            "marker": {"type": "str", "required": True},
            "adopt": {"type": "bool", "default": False},
            "max_buckets": {"type": "int"},
            "purge_buckets": {"type": "list", "elements": "str", "default": []},
            "state": {"type": "str", "default": "present", "choices": ["present", "absent"]},
            "conf": {"type": "path", "default": "/etc/ceph/ceph.conf"},
        },
        supports_check_mode=True,
    )
    p = module.params
    admin = Admin(module)
    suffix = f"[{p['marker']}]"
    wanted_name = f"{p['display_name']} {suffix}".strip()
    info = admin.run("user", "info", "--uid", p["uid"], missing=(EINVAL, ENOENT))
    marked = info is not None and str(info.get("display_name", "")).endswith(suffix)
    if p["state"] == "absent":
        absent(module, admin, info, marked)
    if info is None:
        if module.check_mode:
            module.exit_json(changed=True, marked=False, keys=None)
        args = ["user", "create", "--uid", p["uid"], "--display-name", wanted_name]
        if p["max_buckets"] is not None:
            args += ["--max-buckets", str(p["max_buckets"])]
        info = admin.run(*args) or {}
        module.exit_json(changed=True, marked=False, keys=current_key(info, p["uid"]))
    if not marked and not p["adopt"]:
        module.fail_json(
            msg=f"RGW user {p['uid']} exists and deploykit did not create it (display name "
                f"{info.get('display_name')!r} lacks {suffix}): not adopted, its keys not "
                "read. Use another user id, or set adopt (ceph_rgw_s3_adopt_existing: true) "
                "to take it over", marked=False)
    modify = []
    if not marked:
        modify += ["--display-name", wanted_name]
    if p["max_buckets"] is not None and info.get("max_buckets") != p["max_buckets"]:
        modify += ["--max-buckets", str(p["max_buckets"])]
    if modify and not module.check_mode:
        info = admin.run("user", "modify", "--uid", p["uid"], *modify) or info
    module.exit_json(changed=bool(modify), marked=marked, keys=current_key(info, p["uid"]))


if __name__ == "__main__":
    main()
