"""Who may do what to the cache bucket: the serving identity, its bucket policy, the marker
on what `up` creates, and the bucket quota (site-wide, pure).

The bucket's owner (ceph_rgw_s3_user) keeps every bucket-level right and its keys stay on
the admin host. Serving hosts get a second RGW user, not a subuser: a subuser acts as its
parent user, so RGW treats it as the bucket owner for owner-only operations (PutBucketPolicy,
DeleteBucket) and a bucket policy cannot narrow it; a separate user is a separate principal
(`arn:aws:iam:::user/<uid>`) that a bucket policy grants exactly what LMCache sends.
"""

from __future__ import annotations

from typing import Any

from deploy_kit.config.models import HostConfig
from deploy_kit.config.site import Site

# The verify round trip's objects (verify/probes/s3_probe.py): the one prefix the serving
# identity may delete, so verify cleans up after itself; no LMCache key starts with it
# (keys start with the model name or path, cache/keys.py).
PROBE_PREFIX = "deploykit-verify-probe"

# What LMCache's S3 connector sends (research/lmcache-rgw-roundtrip.md "Wire details",
# lmcache-vllm-facts.md 1.8): HEAD (a lookup, and before every get), ranged GET, PUT as a
# managed multipart upload (RGW authorises initiate, part and complete as s3:PutObject),
# and an abort when an upload fails. No List, no Delete.
OBJECT_ACTIONS = ["s3:AbortMultipartUpload", "s3:GetObject", "s3:PutObject"]
# Not used by LMCache, but without it RGW answers a HEAD or GET of a missing key with 403
# instead of 404 (S3 semantics: hides which keys exist). A 403 is a silent miss for LMCache
# too, but it reads as an auth failure in RGW's log and in verify; listing reveals no more
# than GetObject already can.
BUCKET_ACTIONS = ["s3:ListBucket"]


def serving_user(c: HostConfig) -> str:
    """The serving hosts' RGW user: the owner's uid with a fixed suffix."""
    return f"{c.ceph_rgw_s3_user}-serving"


def marker(site: Site) -> str:
    """What marks the user and bucket `up` created for this site (display-name suffix and
    bucket tag); an unmarked one of the same name is not adopted or deleted."""
    return f"deploykit-site={site.name}"


def _principal(uid: str) -> dict[str, list[str]]:
    return {"AWS": [f"arn:aws:iam:::user/{uid}"]}


def bucket_policy(c: HostConfig) -> dict[str, Any]:
    """The serving identity's rights on the cache bucket, nothing bucket-level beyond a
    listing: it cannot change the policy, the lifecycle or the quota, nor delete the bucket
    or any chunk (only verify's own probe objects)."""
    bucket = c.deploykit_s3_bucket
    who = _principal(serving_user(c))
    return {"Version": "2012-10-17", "Statement": [
        {"Sid": "deploykit-serving-objects", "Effect": "Allow", "Principal": who,
         "Action": OBJECT_ACTIONS, "Resource": [f"arn:aws:s3:::{bucket}/*"]},
        {"Sid": "deploykit-serving-list", "Effect": "Allow", "Principal": who,
         "Action": BUCKET_ACTIONS, "Resource": [f"arn:aws:s3:::{bucket}"]},
        {"Sid": "deploykit-verify-probes", "Effect": "Allow", "Principal": who,
         "Action": ["s3:DeleteObject"], "Resource": [f"arn:aws:s3:::{bucket}/{PROBE_PREFIX}*"]},
    ]}


def quota_bytes(site: Site) -> int:
    """The bucket quota: ceph_rgw_s3_quota_bytes when set (0: none), else the bytes `plan`
    computes for every model's deploykit_cache_target_tokens (0 when no model is known)."""
    from deploy_kit.plan.plan import cache_bytes

    s = site.settings
    if s.ceph_rgw_s3_quota_bytes is not None:
        return s.ceph_rgw_s3_quota_bytes
    try:
        return cache_bytes(site)
    except (ValueError, KeyError):  # a model plan cannot size: no quota rather than no render
        return 0


def site_facts(site: Site) -> dict[str, Any]:
    """site.json's `s3` entry, read by the ceph_rgw_s3 and serving roles."""
    s = site.settings
    return {"owner": s.ceph_rgw_s3_user, "serving_user": serving_user(s),
            "marker": marker(site), "adopt_existing": s.ceph_rgw_s3_adopt_existing,
            "policy": bucket_policy(s), "quota_bytes": quota_bytes(site)}
