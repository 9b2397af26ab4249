"""Which S3 key of an RGW user is current (pure): the same rule as the Ansible modules'
plugins/module_utils/deploykit_rgw_keys.py (a module cannot import deploy_kit on the admin
host, and the wheel does not ship plugins/; tests/unit/test_rgw_key_module.py holds the two
to the same answers). The newest key `deploykit secrets rotate s3` added (DK<unix time><8>),
else the user's first key."""

from __future__ import annotations

import re
from typing import Any

PATTERN = re.compile(r"^DK(\d{10})[A-Z0-9]{8}$")


def current_key(info: dict[str, Any], uid: str) -> dict[str, str] | None:
    keys = [{"access_key": str(k["access_key"]), "secret_key": str(k["secret_key"])}
            for k in info.get("keys", []) if k.get("user") == uid and k.get("access_key")]
    ours = [k for k in keys if PATTERN.match(k["access_key"])]
    if ours:
        return max(ours, key=lambda k: k["access_key"])
    return keys[0] if keys else None
