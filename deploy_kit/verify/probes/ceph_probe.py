"""Pools, RGW daemons and version, read with the Ceph CLI on the admin host."""

from __future__ import annotations

import json
import shlex
from typing import Any

from deploy_kit.config.site import Host, Site
from deploy_kit.transport.hosts import ShellResult, run_many, sections

CephState = tuple[list[dict[str, Any]] | None, int | None, str | None, str | None]
TIMEOUT = 60


def script(admin: Host) -> str:
    conf = shlex.quote(admin.config.deploykit_ceph_conf)
    # `echo` before each marker: Ceph's JSON output has no trailing newline
    return (f"echo '### pools'; ceph --conf {conf} osd pool ls detail -f json; "
            f"echo; echo '### status'; ceph --conf {conf} -s -f json; "
            f"echo; echo '### version'; ceph --conf {conf} version")


def parse(admin: Host, result: ShellResult) -> CephState:
    try:
        s = sections(result.text())
        pools = json.loads(s["pools"])
        status = json.loads(s["status"])
        daemons = status.get("servicemap", {}).get("services", {}).get("rgw", {}).get(
            "daemons", {})
        count = len([k for k in daemons if k != "summary"])
        return pools, count, s.get("version", "").strip() or None, None
    except Exception as exc:
        return None, None, None, f"ceph on {admin.name}: {type(exc).__name__}: {exc}"


def probe(site: Site, admin: Host) -> CephState:
    return parse(admin, run_many(site, [(admin, script(admin))], TIMEOUT)[0])
