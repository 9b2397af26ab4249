#!/usr/bin/python
"""Ensure an RGW bucket quota (max size in bytes, or none), changing it only when it differs."""

from __future__ import annotations

import json

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: deploykit_rgw_bucket_quota
short_description: Set, enable or disable an RGW bucket's size quota only when it differs
description: >-
  Reads the bucket's quota with radosgw-admin bucket stats on this host (the Ceph admin
  host) and runs quota set / enable / disable (scope bucket) only for the difference; check
  mode reports it. Objects are not limited (max-objects -1).
options:
  bucket: {type: str, required: true, description: bucket name}
  max_size: {type: int, required: true, description: "bytes; 0: no quota (disabled)"}
  conf: {type: path, default: /etc/ceph/ceph.conf, description: ceph.conf on this host}
author: deploykit
"""

EXAMPLES = r"""
- name: Bound the cache bucket
  deploykit_rgw_bucket_quota: {bucket: lmcache, max_size: 107374182400}
"""

RETURN = r"""
actions: {description: the radosgw-admin commands run (or that would run in check mode), type: list}
"""


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "bucket": {"type": "str", "required": True},
            "max_size": {"type": "int", "required": True},
            "conf": {"type": "path", "default": "/etc/ceph/ceph.conf"},
        },
        supports_check_mode=True,
    )
    p = module.params
    base = ["radosgw-admin", "--conf", p["conf"]]

    def admin(*args: str) -> str:
        rc, out, err = module.run_command([*base, *args])
        if rc != 0:
            module.fail_json(msg=f"radosgw-admin {' '.join(args)} failed (rc {rc}): "
                                 f"{err.strip()[-300:]}")
        return out

    quota = json.loads(admin("bucket", "stats", "--bucket", p["bucket"])).get("bucket_quota", {})
    have = {"enabled": bool(quota.get("enabled")), "max_size": int(quota.get("max_size", -1)),
            "max_objects": int(quota.get("max_objects", -1))}
    scope = ["--quota-scope=bucket", f"--bucket={p['bucket']}"]
    actions: list[list[str]] = []
    if p["max_size"] > 0:
        # RGW keeps a quota in whole KiB (max_size_kb), rounded up: a size plan computes with
        # the encryption frame (29 bytes a chunk) is no multiple of 1024, and compared as
        # given it would differ on every run
        size = -(-p["max_size"] // 1024) * 1024
        want = {"enabled": True, "max_size": size, "max_objects": -1}
        if (have["max_size"], have["max_objects"]) != (size, -1):
            actions.append(["quota", "set", *scope, f"--max-size={size}",
                            "--max-objects=-1"])
        if not have["enabled"]:
            actions.append(["quota", "enable", *scope])
    else:
        want = {**have, "enabled": False}
        if have["enabled"]:
            actions.append(["quota", "disable", *scope])
    if not module.check_mode:
        for action in actions:
            admin(*action)
    module.exit_json(changed=bool(actions), actions=[" ".join(["radosgw-admin", *a])
                                                      for a in actions],
                     diff={"before": have, "after": want})


if __name__ == "__main__":
    main()
