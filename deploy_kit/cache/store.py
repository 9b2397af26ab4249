"""The bucket, read and pruned with the S3 API (keys fetched from RGW, never printed)."""

from __future__ import annotations

import json
import shlex
import ssl
import urllib.parse
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime

from deploy_kit.cache.keys import StoredObject
from deploy_kit.config.site import Site
from deploy_kit.core.errors import DeployKitError
from deploy_kit.core.rgw_keys import current_key
from deploy_kit.render import tls
from deploy_kit.transport.hosts import TransportError, run_on
from deploy_kit.transport.sigv4 import Credentials, request


class CacheError(DeployKitError):
    pass


@dataclass(frozen=True)
class Bucket:
    address: str
    port: int
    host: str  # <bucket>.<fqdn>: virtual-hosted, as LMCache addresses it
    region: str
    credentials: Credentials
    tls: ssl.SSLContext | None = None  # deploykit_s3_tls: https, the site CA as the anchor


def open_bucket(site: Site) -> Bucket:
    admin = site.group("ceph_admin")
    rgw = site.group("rgw")
    if not admin or not rgw:
        raise CacheError("the inventory needs ceph_admin and rgw hosts")
    s = site.settings
    script = (f"radosgw-admin --conf {shlex.quote(admin[0].config.deploykit_ceph_conf)} user "
              f"info --uid {shlex.quote(s.ceph_rgw_s3_user)}")
    try:
        info = json.loads(run_on(site, admin[0], script, timeout=60))
        key = current_key(info, s.ceph_rgw_s3_user)  # after a rotation: the new key
        if key is None:
            raise KeyError("keys")
    except TransportError as exc:
        raise CacheError(f"cannot read the S3 user {s.ceph_rgw_s3_user}: {exc.message}",
                         hint="is the admin host reachable with the inventory's settings?"
                         ) from None
    except (ValueError, KeyError, IndexError, OSError) as exc:
        raise CacheError(f"cannot read the S3 user {s.ceph_rgw_s3_user} on {admin[0].name}: "
                         f"{type(exc).__name__}", hint="has `deploykit up` run?") from None
    return Bucket(address=rgw[0].address, port=s.deploykit_s3_port,
                  host=f"{s.deploykit_s3_bucket}.{s.deploykit_s3_fqdn}",
                  region=s.deploykit_s3_region,
                  credentials=Credentials(key["access_key"], key["secret_key"]),
                  tls=_site_tls(site))


def _site_tls(site: Site) -> ssl.SSLContext | None:
    s = site.settings
    if not s.deploykit_s3_tls:
        return None
    try:
        return ssl.create_default_context(cafile=str(tls.ca_cert_path(site.root, s)))
    except OSError as exc:
        raise CacheError(f"cannot read the site CA: {exc}",
                         hint="has `deploykit up` run (it creates the CA)?") from None


def canonical_query(params: dict[str, str]) -> str:
    return "&".join(f"{urllib.parse.quote(k, safe='-_.~')}={urllib.parse.quote(v, safe='-_.~')}"
                    for k, v in sorted(params.items()))


def _tag(e: ET.Element) -> str:
    return e.tag.rsplit("}", 1)[-1]


def list_model_objects(bucket: Bucket, model: str) -> list[StoredObject]:
    """Every object of one model string, in any of LMCache's layouts (none twice)."""
    from deploy_kit.cache.keys import listed_under, model_prefixes

    found = {o.key: o for prefix in model_prefixes(model) for o in list_objects(bucket, prefix)
             if listed_under(o.key, prefix)}
    return list(found.values())


def list_objects(bucket: Bucket, prefix: str = "") -> list[StoredObject]:
    objects: list[StoredObject] = []
    token = None
    while True:
        params = {"list-type": "2", "max-keys": "1000"}
        if prefix:
            params["prefix"] = prefix
        if token:
            params["continuation-token"] = token
        status, body = request(bucket.address, bucket.port, "GET", "/", bucket.host,
                               bucket.region, bucket.credentials, query=canonical_query(params),
                               tls=bucket.tls)
        if status != 200:
            raise CacheError(f"listing the bucket failed: HTTP {status}")
        root = ET.fromstring(body)
        for element in root:
            if _tag(element) == "Contents":
                fields = {_tag(c): c.text or "" for c in element}
                objects.append(StoredObject(
                    key=fields["Key"], size=int(fields.get("Size", 0)),
                    modified=datetime.fromisoformat(fields["LastModified"].replace("Z", "+00:00"))))
        truncated = next((e.text for e in root if _tag(e) == "IsTruncated"), "false")
        token = next((e.text for e in root if _tag(e) == "NextContinuationToken"), None)
        if truncated != "true" or not token:
            return objects


def delete_objects(bucket: Bucket, keys: list[str], workers: int = 16) -> int:
    def delete(key: str) -> int:
        # `/` kept, as LMCache writes the path (server-topology keys start with the model
        # path): an encoded %2F is another canonical URI and RGW refuses the signature
        path = "/" + urllib.parse.quote(key, safe="/-_.~")
        status, _ = request(bucket.address, bucket.port, "DELETE", path, bucket.host,
                            bucket.region, bucket.credentials, tls=bucket.tls)
        return 1 if status in (200, 204) else 0

    with ThreadPoolExecutor(max_workers=workers) as pool:
        return sum(pool.map(delete, keys))
