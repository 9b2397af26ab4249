"""What the serving identity may do to the bucket: its object requests must work, and every
bucket-level change must be refused (403).

Each refused request is built so that, were RGW to accept it, it would still change
nothing: a policy that is not JSON (RGW answers 400 MalformedPolicy), a lifecycle that is not
XML (400 MalformedXML), DeleteBucket only while this probe's own object keeps the bucket
non-empty (409 BucketNotEmpty), and a DELETE of a key that does not exist (204). RGW checks
the permission before it reads the body or the bucket (rgw_process_authenticated:
verify_permission, then execute), so 403 is the answer only a refusal gives.
"""

from __future__ import annotations

import os
import ssl

from deploy_kit.render.s3_access import PROBE_PREFIX
from deploy_kit.transport.sigv4 import Credentials, request
from deploy_kit.verify.model import PrivilegeProbe

NOT_A_POLICY = b"deploykit verify: not a policy, refused either way"
NOT_A_LIFECYCLE = b"deploykit verify: not a lifecycle configuration"


def probe(address: str, port: int, host: str, region: str, creds: Credentials, source: str,
          tls: ssl.SSLContext | None = None) -> PrivilegeProbe:
    result = PrivilegeProbe(address=address, credentials_from=source)
    tag = os.urandom(4).hex()
    guard = f"/{PROBE_PREFIX}-guard-{tag}"

    def send(method: str, path: str, body: bytes = b"", query: str = "") -> int:
        return request(address, port, method, path, host, region, creds, body, query=query,
                       timeout=15, tls=tls)[0]

    try:
        result.put = send("PUT", guard, b"deploykit verify: keeps the bucket non-empty")
        result.get = send("GET", guard)
        result.head_missing = send("HEAD", f"/deploykit-verify-missing-{tag}")
        result.refused["PutBucketPolicy"] = send("PUT", "/", NOT_A_POLICY, "policy=")
        result.refused["PutBucketLifecycle"] = send("PUT", "/", NOT_A_LIFECYCLE, "lifecycle=")
        # never on a bucket that could be empty: only while the guard object is in it
        if send("HEAD", guard) == 200:
            result.refused["DeleteBucket"] = send("DELETE", "/")
        result.refused["DeleteObject (a chunk)"] = send("DELETE", f"/deploykit-verify-chunk-{tag}")
        result.cleanup = send("DELETE", guard)
    except OSError as exc:
        result.error = f"{type(exc).__name__}: {exc}"
    return result
