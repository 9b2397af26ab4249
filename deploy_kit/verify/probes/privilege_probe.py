"""What a serving identity may do to the bucket: its object requests must work, every
bucket-level change must be refused (403), and so must every request on another model's keys.

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
import urllib.parse
import xml.etree.ElementTree as ET

from deploy_kit.render.s3_access import PROBE_PREFIX
from deploy_kit.transport.sigv4 import Credentials, request
from deploy_kit.verify.model import IsolationProbe, PrivilegeProbe
from deploy_kit.verify.probes.s3_probe import listing

NOT_A_POLICY = b"deploykit verify: not a policy, refused either way"
NOT_A_LIFECYCLE = b"deploykit verify: not a lifecycle configuration"
# RGW refuses a Content-MD5 that is not the base64 of 16 bytes (400 InvalidDigest) after the
# permission check and before it stores a byte: a PUT allowed by mistake writes nothing
BAD_DIGEST = {"Content-MD5": "deploykit-verify-not-a-digest"}


def key_path(key: str) -> str:
    return "/" + urllib.parse.quote(key, safe="-_.~/")


def probe(address: str, port: int, host: str, region: str, creds: Credentials, source: str,
          tls: ssl.SSLContext | None = None, own_prefix: str = "") -> PrivilegeProbe:
    """`own_prefix`: the identity's model's key prefix, where a missing key is a 403 (the
    policy grants no s3:ListBucket outside listings: render/s3_access.py says why)."""
    result = PrivilegeProbe(address=address, credentials_from=source)
    tag = os.urandom(4).hex()
    guard = f"/{PROBE_PREFIX}-guard-{tag}"

    def send(method: str, path: str, body: bytes = b"", query: str = "") -> int:
        return request(address, port, method, path, host, region, creds, body, query=query,
                       timeout=15, tls=tls)[0]

    try:
        result.put = send("PUT", guard, b"deploykit verify: keeps the bucket non-empty")
        result.get = send("GET", guard)
        result.head_missing = send("HEAD", key_path(f"{own_prefix}deploykit-verify-missing-{tag}"))
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


def first_key(address: str, port: int, host: str, region: str, creds: Credentials, prefix: str,
              tls: ssl.SSLContext | None = None) -> str | None:
    """One stored key under `prefix`, listed with that prefix's own identity; None: none."""
    status, body = request(address, port, "GET", "/", host, region, creds,
                           query=listing(prefix), timeout=15, tls=tls)
    if status != 200:
        return None
    keys = [e.text or "" for e in ET.fromstring(body).iter() if e.tag.endswith("}Key")
            or e.tag == "Key"]
    return keys[0] if keys else None


def isolation(address: str, port: int, host: str, region: str, probe_: IsolationProbe,
              creds: Credentials, target: str | None,
              tls: ssl.SSLContext | None = None) -> IsolationProbe:
    """`creds` (one model's) against the other model's keys: `target`, a key that model
    stored (else a made-up one under its prefix), read, written and listed. Nothing is
    changed were RGW to allow any of it: the PUT carries an invalid Content-MD5."""
    p = probe_
    p.target = target or f"{p.other_prefix}deploykit-verify-isolation-{os.urandom(4).hex()}"

    def send(method: str, key: str, query: str = "", body: bytes = b"",
             unsigned: dict[str, str] | None = None) -> int:
        return request(address, port, method, key_path(key), host, region, creds, body,
                       query=query, timeout=15, tls=tls, unsigned=unsigned)[0]

    try:
        p.own_list = send("GET", "", listing(p.own_prefix))
        p.refused["GET"] = send("GET", p.target)
        p.refused["HEAD"] = send("HEAD", p.target)
        # a key it never stored: 403 as well, or A learns which keys the other model holds
        p.refused["HEAD (a missing key)"] = send(
            "HEAD", f"{p.other_prefix}deploykit-verify-missing-{os.urandom(4).hex()}")
        p.refused["PUT"] = send("PUT", p.target, body=b"deploykit verify", unsigned=BAD_DIGEST)
        p.refused["LIST"] = send("GET", "", listing(p.other_prefix))
        p.refused["LIST (no prefix)"] = send("GET", "", listing(""))
    except (OSError, ET.ParseError) as exc:
        p.error = f"{type(exc).__name__}: {exc}"
    return p
