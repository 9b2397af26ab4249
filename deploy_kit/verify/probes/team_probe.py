"""Teams on the tier, from the controller with keys read from a team's serving host (as the
other S3 probes: verify/gather.py): the team's identity uses its own bucket and is refused
(403) every read, write and listing of another team's; and where hosts encrypt their L2, one
stored chunk is an AES-GCM frame of the size the model's geometry says.

Nothing another team stores is changed were RGW to allow a request: the GET is of a key
that never exists, the PUT carries an invalid Content-MD5 (RGW checks the permission first,
then refuses the digest with 400 before storing a byte: privilege_probe.py), the LIST reads.
"""

from __future__ import annotations

import os
import ssl
import urllib.parse
import xml.etree.ElementTree as ET

from deploy_kit.render.s3_access import PROBE_PREFIX
from deploy_kit.transport.sigv4 import Credentials, request
from deploy_kit.verify.model import EncryptionProbe, TeamIsolationProbe
from deploy_kit.verify.probes.privilege_probe import BAD_DIGEST, key_path
from deploy_kit.verify.probes.s3_probe import listing

# LMCache 0.5.6's AES-GCM frame: a version byte, a 12-byte IV, the ciphertext, a 16-byte
# tag (v1/distributed/serde/aesgcm.py:32-36)
FRAME_VERSION = 0x01
FRAME_OVERHEAD = 1 + 12 + 16


def isolation(address: str, port: int, fqdn: str, region: str, probe_: TeamIsolationProbe,
              creds: Credentials, others: dict[str, str],
              tls: ssl.SSLContext | None = None) -> TeamIsolationProbe:
    """`creds` (one host of `probe_.team`) on its own bucket (a probe object PUT, read,
    listed, deleted) and on each of `others` (team -> bucket): GET, PUT, LIST."""
    p = probe_
    tag = os.urandom(4).hex()

    def send(bucket: str, method: str, key: str, query: str = "", body: bytes = b"",
             unsigned: dict[str, str] | None = None) -> int:
        return request(address, port, method, key_path(key), f"{bucket}.{fqdn}", region,
                       creds, body, query=query, timeout=15, tls=tls, unsigned=unsigned)[0]

    own = f"{PROBE_PREFIX}-team-{tag}"
    try:
        p.own["PUT"] = send(p.bucket, "PUT", own, body=b"deploykit verify: team isolation")
        p.own["GET"] = send(p.bucket, "GET", own)
        p.own["LIST"] = send(p.bucket, "GET", "", listing(""))
        p.own["DELETE"] = send(p.bucket, "DELETE", own)
        for team, bucket in sorted(others.items()):
            missing = f"deploykit-verify-team-isolation-{tag}"
            p.refused[team] = (bucket, {
                "GET": send(bucket, "GET", missing),
                "PUT": send(bucket, "PUT", missing, body=b"deploykit verify",
                            unsigned=BAD_DIGEST),
                "LIST": send(bucket, "GET", "", listing(""))})
    except OSError as exc:
        p.error = f"{type(exc).__name__}: {exc}"
    return p


def first_object(body: bytes) -> tuple[str, int] | None:
    """The first (key, size) of a ListObjectsV2 answer; None: no object."""
    root = ET.fromstring(body)
    for element in root.iter():
        if element.tag.rsplit("}", 1)[-1] != "Contents":
            continue
        fields = {child.tag.rsplit("}", 1)[-1]: child.text or "" for child in element}
        return fields.get("Key", ""), int(fields.get("Size", "0"))
    return None


def encryption(address: str, port: int, fqdn: str, region: str, probe_: EncryptionProbe,
               creds: Credentials, tls: ssl.SSLContext | None = None) -> EncryptionProbe:
    """List one chunk under the probe's prefix, then read its first byte (a ranged GET)."""
    p = probe_
    host = f"{p.bucket}.{fqdn}"
    try:
        status, body = request(address, port, "GET", "/", host, region, creds,
                               query=listing(p.prefix), timeout=15, tls=tls)
        if status != 200:
            p.error = f"listing {p.prefix}… answered HTTP {status}"
            return p
        found = first_object(body)
        if found is None:
            return p
        p.key, p.size = found
        path = "/" + urllib.parse.quote(p.key, safe="-_.~/")
        status, first = request(address, port, "GET", path, host, region, creds,
                                timeout=15, tls=tls, unsigned={"Range": "bytes=0-0"})
        if status not in (200, 206) or not first:
            p.error = f"reading {p.key} answered HTTP {status}"
            return p
        p.first_byte = first[0]
    except (OSError, ET.ParseError, ValueError) as exc:
        p.error = f"{type(exc).__name__}: {exc}"
    return p
