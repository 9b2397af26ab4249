"""S3 through the virtual-hosted name, against every resolved address, with each serving
host's deployed credentials profile."""

from __future__ import annotations

import hashlib
import os
import re
import ssl
import urllib.parse
import xml.etree.ElementTree as ET
from typing import Any

from deploy_kit.render.s3_access import PROBE_PREFIX
from deploy_kit.transport.sigv4 import Credentials, request
from deploy_kit.verify.model import S3Probe

# the one prefix the serving identity may delete (its bucket policy)
OBJECT_PREFIX = f"/{PROBE_PREFIX}"


def _tag(element: ET.Element) -> str:
    return element.tag.rsplit("}", 1)[-1]


def parse_lifecycle(body: bytes) -> list[dict[str, Any]]:
    """S3 LifecycleConfiguration XML -> the rule dicts boto3 would return."""
    rules = []
    for rule in ET.fromstring(body):
        if _tag(rule) != "Rule":
            continue
        out: dict[str, Any] = {}
        for child in rule:
            name = _tag(child)
            if name in ("ID", "Status", "Prefix"):
                out[name] = child.text or ""
            elif name == "Filter":
                prefix = next((c.text or "" for c in child if _tag(c) == "Prefix"), "")
                out["Filter"] = {"Prefix": prefix}
            elif name == "Expiration":
                out["Expiration"] = {_tag(c): int(c.text or 0) for c in child}
            elif name == "AbortIncompleteMultipartUpload":
                out[name] = {_tag(c): int(c.text or 0) for c in child}
        rules.append(out)
    return rules


def listing(prefix: str) -> str:
    """ListObjectsV2's query for one key under `prefix` (none: the whole bucket), sorted
    and encoded as SigV4 signs it."""
    params = {"list-type": "2", "max-keys": "1", **({"prefix": prefix} if prefix else {})}
    return "&".join(f"{k}={urllib.parse.quote(v, safe='-_.~')}"
                    for k, v in sorted(params.items()))


def auth(address: str, port: int, host: str, region: str, creds: Credentials,
         source: str, tls: ssl.SSLContext | None = None, prefix: str = "") -> S3Probe:
    """A listing of one key under the host's model's `prefix`: each identity may list only
    its own model's keys (render/s3_access.py), so this is what a good key answers 200."""
    result = S3Probe(address=address, host_header=host, credentials_from=source)
    try:
        result.auth_status, _ = request(address, port, "GET", "/", host, region, creds,
                                        query=listing(prefix), timeout=15, tls=tls)
    except OSError as exc:
        result.error = f"{type(exc).__name__}: {exc}"
    return result


def roundtrip(result: S3Probe, port: int, region: str, creds: Credentials, size: int,
              with_lifecycle: bool, tls: ssl.SSLContext | None = None) -> S3Probe:
    payload = os.urandom(size)
    a, h = result.address, result.host_header
    # one object per probe: concurrent round trips must not overwrite each other
    key = f"{OBJECT_PREFIX}-{a.replace(':', '_')}-{os.urandom(4).hex()}"
    try:
        result.put, _ = request(a, port, "PUT", key, h, region, creds, payload, tls=tls)
        result.head, _ = request(a, port, "HEAD", key, h, region, creds, tls=tls)
        result.get, body = request(a, port, "GET", key, h, region, creds, tls=tls)
        result.same = hashlib.sha256(body).digest() == hashlib.sha256(payload).digest()
        result.bytes = len(body)
        result.delete, _ = request(a, port, "DELETE", key, h, region, creds, tls=tls)
        _, anonymous = request(a, port, "GET", "/", h, region, None, tls=tls)
        match = re.search(rb"<BucketName>([^<]*)</BucketName>", anonymous)
        result.anonymous_bucket = match.group(1).decode() if match else ""
        if with_lifecycle:
            status, body = request(a, port, "GET", "/", h, region, creds, query="lifecycle=",
                                   tls=tls)
            result.lifecycle = parse_lifecycle(body) if status == 200 else []
    except (OSError, ET.ParseError) as exc:
        result.error = f"{type(exc).__name__}: {exc}"
    return result
