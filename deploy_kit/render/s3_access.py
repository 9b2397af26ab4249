"""Who may do what to the cache buckets: the site bucket, each team's bucket and each
sharing group's (lmcache_s3_bucket), the serving identities (one per team, one per model of
the hosts in no team), each bucket's policy, the marker on what `up` creates, and each
bucket's quota (site-wide, pure).

A team's identity is granted its team's bucket whole, with s3:DeleteObject: LMCache's
per-salt IsolatedLRU eviction deletes over-quota chunks from S3 (docs/teams.md), and no
other identity is granted anything in that bucket, so a delete right harms no one else.

The bucket's owner (ceph_rgw_s3_user) keeps every bucket-level right and its keys stay on
the admin host. Serving hosts get other RGW users, not subusers: a subuser acts as its
parent user, so RGW treats it as the bucket owner for owner-only operations (PutBucketPolicy,
DeleteBucket) and a bucket policy cannot narrow it; a separate user is a separate principal
(`arn:aws:iam:::user/<uid>`) that a bucket policy grants exactly what LMCache sends. Each
model's hosts hold the keys of that model's identity only (config/s3_identities.py says
which keys a model's chunks have), so a host can read, write and list its own model's chunks
and nothing of another model's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from deploy_kit.config.models import HostConfig, team_bucket
from deploy_kit.config.s3_identities import (
    RESERVED_PREFIXES,
    Identity,
    bucket_names,
    host_uid,
    identities,
    lease_prefix,
    legacy_uid,
    uid_of,
)
from deploy_kit.config.site import Site

# The verify round trip's objects (verify/probes/s3_probe.py): the one prefix a serving
# identity may delete, so verify cleans up after itself; no LMCache key starts with it
# (keys start with the model name or path, cache/keys.py). Every identity may use it:
# nothing reads it but verify.
PROBE_PREFIX = RESERVED_PREFIXES[1]

# What LMCache's S3 connector sends (research/lmcache-rgw-roundtrip.md "Wire details",
# lmcache-vllm-facts.md 1.8): HEAD (a lookup, and before every get), ranged GET, PUT as a
# managed multipart upload (RGW authorises initiate, part and complete as s3:PutObject),
# and an abort when an upload fails. No Delete. The server's S3 adapter also lists its own
# model's keys (s3_l2_adapter.py list_l2_keys: prefix `<model>@`).
OBJECT_ACTIONS = ["s3:AbortMultipartUpload", "s3:GetObject", "s3:PutObject"]
BUCKET_ACTIONS = ["s3:ListBucket"]
# RGW's condition keys (src/rgw/rgw_op.cc RGWListBucket::verify_permission): a listing puts
# `s3:prefix` into the request's environment only when it names a prefix; Condition::eval
# (src/rgw/rgw_iam_policy.cc) answers false for a StringLike on a key the request lacks.
# So a listing is allowed only under a prefix the identity owns, and nothing else asks RGW
# for s3:ListBucket with that key. The price: RGW answers a GET or HEAD of a missing key
# with 404 only to a requester with s3:ListBucket on the bucket (rgw_op.cc read_obj_policy),
# so every lookup miss is a 403. LMCache takes a 403 as the miss it is, quietly (0.5.6
# s3_connector.py _get_object_size: debug; s3_l2_adapter.py: not a connection error, so no
# breaker). Granting ListBucket without the prefix instead (for 404s) would answer a missing
# key of another model 404 and a stored one 403: an oracle, for any model's host, of which
# prompts another model has cached (measured, tests/integration/test_rgw_access.py).
LIST_KEY = "s3:prefix"


# a team's identity on its own bucket: LMCache's eviction deletes (IsolatedLRU over quota)
TEAM_OBJECT_ACTIONS = sorted([*OBJECT_ACTIONS, "s3:DeleteObject"])


def serving_user(c: HostConfig) -> str:
    """The RGW user whose keys a serving host holds: its team's identity, else its
    model's."""
    return host_uid(c)


def marker(site: Site) -> str:
    """What marks the users and bucket `up` created for this site (display-name suffix and
    bucket tag); an unmarked one of the same name is not adopted or deleted."""
    return f"deploykit-site={site.name}"


def _principal(*uids: str) -> dict[str, list[str]]:
    return {"AWS": [f"arn:aws:iam:::user/{uid}" for uid in uids]}


def _objects(bucket: str, prefixes: Sequence[str]) -> list[str]:
    return [f"arn:aws:s3:::{bucket}/{p}*" for p in prefixes]


def identity_statements(bucket: str, identity: Identity) -> list[dict[str, Any]]:
    """One model's rights: its chunks and its lease (get, put, abort an upload), and a
    listing under those prefixes only. A team's: every object of its bucket (delete too)
    and any listing: nothing in the bucket is anyone else's, so a 404 tells no secret."""
    who = _principal(identity.uid)
    if identity.team is not None:
        return [
            {"Sid": f"deploykit-{identity.slug}-objects", "Effect": "Allow", "Principal": who,
             "Action": TEAM_OBJECT_ACTIONS, "Resource": [f"arn:aws:s3:::{bucket}/*"]},
            {"Sid": f"deploykit-{identity.slug}-list", "Effect": "Allow", "Principal": who,
             "Action": BUCKET_ACTIONS, "Resource": [f"arn:aws:s3:::{bucket}"]},
        ]
    owned = [*identity.prefixes, lease_prefix(identity.slug)]
    return [
        {"Sid": f"deploykit-serving-{identity.slug}-objects", "Effect": "Allow",
         "Principal": who, "Action": OBJECT_ACTIONS, "Resource": _objects(bucket, owned)},
        {"Sid": f"deploykit-serving-{identity.slug}-list", "Effect": "Allow",
         "Principal": who, "Action": BUCKET_ACTIONS, "Resource": [f"arn:aws:s3:::{bucket}"],
         "Condition": {"StringLike": {LIST_KEY: [f"{p}*" for p in owned]}}},
    ]


def bucket_policy(bucket: str, ids: Sequence[Identity], legacy: str) -> dict[str, Any]:
    """Every serving identity's rights on the cache bucket, nothing bucket-level: none may
    change the policy, the lifecycle or the quota, delete the bucket or any chunk (only
    verify's own probe objects), nor read, write or list another model's keys. `legacy`
    (the site-wide identity of old releases) is granted nothing."""
    statements = [s for identity in ids for s in identity_statements(bucket, identity)]
    if not ids:  # no serving host with an S3 tier: no grant (RGW refuses an empty policy)
        statements = [{"Sid": "deploykit-no-serving", "Effect": "Deny",
                       "Principal": _principal(legacy), "Action": ["s3:*"],
                       "Resource": [f"arn:aws:s3:::{bucket}", f"arn:aws:s3:::{bucket}/*"]}]
    else:
        statements.append(
            {"Sid": "deploykit-verify-probes", "Effect": "Allow",
             "Principal": _principal(*(i.uid for i in ids)),
             "Action": ["s3:DeleteObject", "s3:GetObject", "s3:PutObject"],
             "Resource": _objects(bucket, [PROBE_PREFIX])})
    return {"Version": "2012-10-17", "Statement": statements}


def quota_bytes(site: Site, bucket: str | None = None) -> int:
    """A bucket's quota (default: the site bucket's; plan/tenancy.py says how)."""
    from deploy_kit.plan.plan import cache_bytes
    from deploy_kit.plan.tenancy import bucket_quota

    return bucket_quota(site, bucket or site.settings.deploykit_s3_bucket,
                        lambda name: cache_bytes(site, bucket=name))


def buckets(site: Site) -> list[dict[str, Any]]:
    """Each bucket's entry in site.json: its name, team (None: not a team's), the identities
    granted in it, its policy and quota (the lifecycle is the site's, one for every bucket)."""
    s = site.settings
    ids = identities(site)
    teams = {team_bucket(t, s.deploykit_s3_bucket): t.name for t in s.teams}
    out = []
    for name in bucket_names(site):
        granted = [i for i in ids if name in i.buckets]
        out.append({"bucket": name, "team": teams.get(name),
                    "serving_users": [i.uid for i in granted],
                    "policy": bucket_policy(name, granted, legacy_uid(s.ceph_rgw_s3_user)),
                    "quota_bytes": quota_bytes(site, name)})
    return out


def site_facts(site: Site) -> dict[str, Any]:
    """site.json's `s3` entry, read by the ceph_rgw_s3 and serving roles and by
    `secrets rotate s3`: every identity (created, rotated, removed by `down`), which one each
    serving host holds, the site-wide identity of old releases (`up` removes it), and every
    bucket with its policy and quota."""
    s = site.settings
    ids = identities(site)
    return {"owner": s.ceph_rgw_s3_user, "serving_users": [i.uid for i in ids],
            "serving_user_of": uid_of(site), "legacy_serving_user": legacy_uid(
                s.ceph_rgw_s3_user),
            "marker": marker(site), "adopt_existing": s.ceph_rgw_s3_adopt_existing,
            "buckets": buckets(site)}
