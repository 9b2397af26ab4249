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
            # the bucket's lifecycle with the owner's rights, which stay on this host (the
            # serving identity may not read it); before `version`, whose status the script's is
            f"echo; echo '### lifecycle'; radosgw-admin --conf {conf} lc get --bucket "
            f"{shlex.quote(admin.config.deploykit_s3_bucket)} 2>/dev/null; "
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


def lifecycle(result: ShellResult) -> list[dict[str, Any]] | None:
    """`radosgw-admin lc get` -> the S3 rules boto3 would return ([]: none; None: unread)."""
    if result.error is not None:
        return None
    try:
        text = sections(result.text(check=False)).get("lifecycle", "").strip()
        if not text:
            return []
        rules = []
        for entry in json.loads(text).get("rule_map", []):
            r = entry["rule"]
            rule: dict[str, Any] = {"ID": r["id"], "Status": r["status"],
                                    "Filter": {"Prefix": r.get("filter", {}).get(
                                        "prefix", r.get("prefix", ""))}}
            if (r.get("expiration") or {}).get("days"):
                rule["Expiration"] = {"Days": int(r["expiration"]["days"])}
            if (r.get("mp_expiration") or {}).get("days"):
                rule["AbortIncompleteMultipartUpload"] = {
                    "DaysAfterInitiation": int(r["mp_expiration"]["days"])}
            rules.append(rule)
        return rules
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
