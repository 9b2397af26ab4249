"""Pools, RGW daemons and version, read with the Ceph CLI on the admin host."""

from __future__ import annotations

import json
import shlex
from typing import Any

from deploy_kit.config.site import Host
from deploy_kit.transport.ssh import run_on, sections

CephState = tuple[list[dict[str, Any]] | None, int | None, str | None, str | None]


def probe(admin: Host) -> CephState:
    conf = shlex.quote(admin.config.deploykit_ceph_conf)
    # `echo` before each marker: Ceph's JSON output has no trailing newline
    script = (f"echo '### pools'; ceph --conf {conf} osd pool ls detail -f json; "
              f"echo; echo '### status'; ceph --conf {conf} -s -f json; "
              f"echo; echo '### version'; ceph --conf {conf} version")
    try:
        s = sections(run_on(admin, script, timeout=60))
        pools = json.loads(s["pools"])
        status = json.loads(s["status"])
        daemons = status.get("servicemap", {}).get("services", {}).get("rgw", {}).get(
            "daemons", {})
        count = len([k for k in daemons if k != "summary"])
        return pools, count, s.get("version", "").strip() or None, None
    except Exception as exc:
        return None, None, None, f"ceph on {admin.name}: {type(exc).__name__}: {exc}"
