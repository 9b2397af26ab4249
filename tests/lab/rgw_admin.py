"""The lab's RGW users as the admin host sees them (radosgw-admin on the controller, which
is the lab's Ceph admin host): a user's record and its current keys."""

from __future__ import annotations

import json
import subprocess
from typing import Any

from deploy_kit.core.rgw_keys import current_key
from deploy_kit.transport.sigv4 import Credentials
from tests.lab.conftest import CEPH_CONF


def admin(*args: str) -> dict[str, Any]:
    done = subprocess.run(["radosgw-admin", "--conf", CEPH_CONF, *args], check=True,
                          capture_output=True, text=True, timeout=60)
    return json.loads(done.stdout) if done.stdout.strip() else {}


def keys_of(uid: str) -> Credentials:
    key = current_key(admin("user", "info", "--uid", uid), uid)
    assert key is not None, uid
    return Credentials(key["access_key"], key["secret_key"])
