"""Which S3 key of an RGW user is the current one (pure; modules and deploy_kit share it).

An RGW user holds several S3 keys, each valid, and `radosgw-admin user info` lists them in
access-key order, so "the first key" changes meaning once a second one exists. deploykit
therefore names the keys it adds itself: `DK` + the UNIX time of the rotation (10 digits) +
8 random characters, 20 in all as RGW's own. The current key is the newest such key; a
user with none (a site from before rotation) keeps its first key. A rotation interrupted
after the new key was added leaves both valid, and every reader already takes the new one.
"""

from __future__ import annotations

import re
import secrets
import string
from typing import Any

PATTERN = re.compile(r"^DK(\d{10})[A-Z0-9]{8}$")
_ALPHABET = string.ascii_uppercase + string.digits


def s3_keys(info: dict[str, Any], uid: str) -> list[dict[str, str]]:
    """The user's own S3 keys (subusers' keys are not the user's)."""
    return [{"access_key": str(k["access_key"]), "secret_key": str(k["secret_key"])}
            for k in info.get("keys", []) if k.get("user") == uid and k.get("access_key")]


def current_key(info: dict[str, Any], uid: str) -> dict[str, str] | None:
    keys = s3_keys(info, uid)
    ours = [k for k in keys if PATTERN.match(k["access_key"])]
    if ours:
        return max(ours, key=lambda k: k["access_key"])
    return keys[0] if keys else None


def new_access_key(now: int, info: dict[str, Any], uid: str) -> str:
    """A fresh deploykit access key that sorts after every one the user holds."""
    stamps = [int(m.group(1)) for k in s3_keys(info, uid)
              if (m := PATTERN.match(k["access_key"]))]
    stamp = max([now, *(s + 1 for s in stamps)])
    return f"DK{stamp:010d}" + "".join(secrets.choice(_ALPHABET) for _ in range(8))
