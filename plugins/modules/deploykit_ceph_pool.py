#!/usr/bin/python
"""Ensure one Ceph pool: read its state, diff against the wanted one, act only on the delta."""

from __future__ import annotations

import json

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: deploykit_ceph_pool
short_description: Create or adjust a replicated Ceph pool, reporting only real changes
description: >-
  Reads the pool with the ceph CLI, compares pg_num, pgp_num, size, min_size, application
  and autoscale mode with the wanted values, and runs only the commands for the difference;
  check mode reports them.
options:
  name: {type: str, required: true, description: pool name}
  pg_num: {type: int, required: true, description: placement groups}
  pgp_num: {type: int, description: placement groups for placement; defaults to pg_num}
  size: {type: int, default: 2, description: replicas}
  min_size: {type: int, default: 1, description: replicas needed for I/O}
  application: {type: str, default: rgw, description: application tag}
  autoscale_mode:
    type: str
    default: "off"
    choices: ["on", "off", "warn"]
    description: pg autoscaler
  conf: {type: path, default: /etc/ceph/ceph.conf, description: ceph.conf on this host}
author: deploykit
"""

EXAMPLES = r"""
- name: Ensure the RGW data pool
  deploykit_ceph_pool: {name: default.rgw.buckets.data, pg_num: 2048, size: 2, min_size: 1}
"""

RETURN = r"""
actions: {description: the ceph commands run (or that would run in check mode), type: list}
"""


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "name": {"type": "str", "required": True},
            "pg_num": {"type": "int", "required": True},
            "pgp_num": {"type": "int"},
            "size": {"type": "int", "default": 2},
            "min_size": {"type": "int", "default": 1},
            "application": {"type": "str", "default": "rgw"},
            "autoscale_mode": {"type": "str", "default": "off", "choices": ["on", "off", "warn"]},
            "conf": {"type": "path", "default": "/etc/ceph/ceph.conf"},
        },
        supports_check_mode=True,
    )
    p = module.params
    base = ["ceph", "--conf", p["conf"]]

    def ceph(*args: str) -> str:
        rc, out, err = module.run_command([*base, *args])
        if rc != 0:
            module.fail_json(msg=f"ceph {' '.join(args)} failed: {err.strip() or out.strip()}")
        return out

    pools = {x["pool_name"]: x for x in json.loads(ceph("osd", "pool", "ls", "detail",
                                                        "-f", "json"))}
    current = pools.get(p["name"])
    pgp = p["pgp_num"] or p["pg_num"]
    want = {"pg_num": p["pg_num"], "pgp_num": pgp, "size": p["size"],
            "min_size": p["min_size"], "pg_autoscale_mode": p["autoscale_mode"],
            "application": p["application"]}
    actions: list[list[str]] = []
    if current is None:
        before: dict[str, object] = {}
        actions.append(["osd", "pool", "create", p["name"], str(p["pg_num"]), str(pgp),
                        "replicated"])
        have: dict[str, object] = {}
    else:
        # Ceph (Nautilus on) moves pg_num/pgp_num towards a target in steps: compare the
        # target, or a re-run during the ramp would ask again and report a change
        have = {"pg_num": current.get("pg_num_target", current.get("pg_num")),
                "pgp_num": current.get("pg_placement_num_target",
                                       current.get("pg_placement_num")),
                "size": current.get("size"), "min_size": current.get("min_size"),
                "pg_autoscale_mode": current.get("pg_autoscale_mode"),
                "application": ",".join(sorted(current.get("application_metadata", {})))}
        before = dict(have)
    for key in ("size", "min_size", "pg_num", "pgp_num", "pg_autoscale_mode"):
        if current is not None and have.get(key) == want[key]:
            continue
        if current is None and key in ("pg_num", "pgp_num"):
            continue
        cmd = ["osd", "pool", "set", p["name"], key, str(want[key])]
        if key == "size" and want["size"] == 1:
            # since Octopus the mons refuse size 1 (EPERM) unless this is set as well
            actions.append(["config", "set", "global", "mon_allow_pool_size_one", "true"])
            cmd.append("--yes-i-really-mean-it")
        actions.append(cmd)
    if current is None or p["application"] not in str(have.get("application", "")).split(","):
        actions.append(["osd", "pool", "application", "enable", p["name"], p["application"]])
    changed = bool(actions)
    if changed and not module.check_mode:
        for cmd in actions:
            ceph(*cmd)
    module.exit_json(changed=changed, actions=[" ".join(["ceph", *a]) for a in actions],
                     diff={"before": before, "after": want})


if __name__ == "__main__":
    main()
