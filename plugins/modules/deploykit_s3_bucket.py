#!/usr/bin/python
"""Ensure an S3 bucket, its lifecycle rules, policy and ownership tags, comparing before
writing (runs on the controller, which has boto3 through deploykit)."""

from __future__ import annotations

import json
from typing import Any

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: deploykit_s3_bucket
short_description: Create an S3 bucket and set its lifecycle, policy and tags only when they differ
description: >-
  Creates the bucket when missing (tagged with tags) and puts the lifecycle configuration
  and the bucket policy only when they differ from what RGW holds. An existing bucket
  without every one of tags was not created by this module's caller: it fails, nothing
  read or written, unless adopt is true (then the tags are added). Keys are never logged.
options:
  endpoint: {type: str, required: true, description: "http(s)://host:port of one gateway"}
  access_key: {type: str, required: true, no_log: true, description: S3 access key}
  secret_key: {type: str, required: true, no_log: true, description: S3 secret key}
  bucket: {type: str, required: true, description: bucket name}
  region: {type: str, default: default, description: SigV4 region}
  lifecycle: {type: dict, required: true, description: "{Rules: [...]} as in the S3 API"}
  ca_bundle: {type: path, description: "CA file for an https endpoint (the site CA)"}
  policy: {type: dict, description: "bucket policy document; unset: left as it is"}
  tags: {type: dict, default: {}, description: "tags that mark the bucket as the caller's"}
  adopt: {type: bool, default: false, description: take over an existing bucket without tags}
author: deploykit
"""

EXAMPLES = r"""
- name: Ensure the cache bucket
  deploykit_s3_bucket:
    endpoint: http://10.0.0.11:80
    access_key: "{{ keys.access_key }}"
    secret_key: "{{ keys.secret_key }}"
    bucket: lmcache
    lifecycle: {Rules: [{ID: expire, Status: Enabled, Filter: {Prefix: ""}, Expiration: {Days: 1}}]}
"""

RETURN = r"""
created: {description: whether the bucket was created, type: bool}
lifecycle_changed: {description: whether the rules were written, type: bool}
policy_changed: {description: whether the policy was written, type: bool}
tags_changed: {description: whether the tags were written, type: bool}
"""


def normalise(rules: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """RGW answers with the legacy top-level Prefix; compare both spellings as one."""
    out = []
    for rule in rules:
        rule = dict(rule)
        if "Prefix" in rule and "Filter" not in rule:
            rule["Filter"] = {"Prefix": rule.pop("Prefix")}
        out.append(rule)
    return sorted(out, key=lambda r: str(r.get("ID")))


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "endpoint": {"type": "str", "required": True},
            "access_key": {"type": "str", "required": True, "no_log": True},
            "secret_key": {"type": "str", "required": True, "no_log": True},
            "bucket": {"type": "str", "required": True},
            "region": {"type": "str", "default": "default"},
            "lifecycle": {"type": "dict", "required": True},
            "ca_bundle": {"type": "path"},
            "policy": {"type": "dict"},
            "tags": {"type": "dict", "default": {}},
            "adopt": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    try:
        import boto3
        from botocore.config import Config
        from botocore.exceptions import ClientError
    except ImportError:
        module.fail_json(msg="boto3 is needed on the controller (pip install deploykit)")
    p = module.params
    # https endpoint (deploykit_s3_tls): verified against the site CA, not certifi's bundle
    s3 = boto3.client("s3", endpoint_url=p["endpoint"], aws_access_key_id=p["access_key"],
                      verify=p["ca_bundle"] or True,
                      aws_secret_access_key=p["secret_key"], region_name=p["region"],
                      config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 3},
                                    request_checksum_calculation="when_required",
                                    response_checksum_validation="when_required"))
    bucket = p["bucket"]

    def code(exc: ClientError) -> str:
        return str(exc.response.get("Error", {}).get("Code"))

    created = False
    try:
        s3.head_bucket(Bucket=bucket)
    except ClientError as exc:
        if code(exc) in ("403", "AccessDenied"):
            module.fail_json(msg=f"bucket {bucket} exists and belongs to another RGW user "
                                 "(or RGW refused these keys): not adopted; use another "
                                 "bucket name")
        if code(exc) not in ("404", "NoSuchBucket"):
            module.fail_json(msg=f"HEAD bucket {bucket}: {exc}")
        created = True
        if not module.check_mode:
            s3.create_bucket(Bucket=bucket)
    wanted_tags = {str(k): str(v) for k, v in p["tags"].items()}
    tags: dict[str, str] = {}
    if not created:
        try:
            tags = {t["Key"]: t["Value"] for t in s3.get_bucket_tagging(Bucket=bucket)["TagSet"]}
        except ClientError as exc:
            if code(exc) not in ("NoSuchTagSet", "NoSuchTagSetError", "404"):
                module.fail_json(msg=f"GET tagging of {bucket}: {exc}")
    missing = {k: v for k, v in wanted_tags.items() if tags.get(k) != v}
    if missing and not created and not p["adopt"]:
        module.fail_json(msg=f"bucket {bucket} exists without the tags "
                             f"{', '.join(f'{k}={v}' for k, v in sorted(missing.items()))}: it "
                             "was not created here, so it is not adopted (no lifecycle or policy "
                             "written); use another bucket name, or set adopt "
                             "(ceph_rgw_s3_adopt_existing: true) to take it over")
    tags_changed = bool(missing)
    if tags_changed and not module.check_mode:  # merged: another tool's tags stay
        s3.put_bucket_tagging(Bucket=bucket, Tagging={"TagSet": [
            {"Key": k, "Value": v} for k, v in sorted((tags | wanted_tags).items())]})
    current: list[dict[str, Any]] = []
    if not created:
        try:
            current = s3.get_bucket_lifecycle_configuration(Bucket=bucket)["Rules"]
        except ClientError as exc:
            if code(exc) != "NoSuchLifecycleConfiguration":
                module.fail_json(msg=f"GET lifecycle of {bucket}: {exc}")
    wanted = p["lifecycle"]["Rules"]
    lifecycle_changed = normalise(current) != normalise(wanted)
    if lifecycle_changed and not module.check_mode:
        s3.put_bucket_lifecycle_configuration(Bucket=bucket,
                                              LifecycleConfiguration={"Rules": wanted})
    policy: dict[str, Any] | None = None
    if p["policy"] is not None and not created:
        try:
            policy = json.loads(s3.get_bucket_policy(Bucket=bucket)["Policy"])
        except ClientError as exc:
            if code(exc) != "NoSuchBucketPolicy":
                module.fail_json(msg=f"GET policy of {bucket}: {exc}")
    policy_changed = p["policy"] is not None and canonical(policy) != canonical(p["policy"])
    if policy_changed and not module.check_mode:
        s3.put_bucket_policy(Bucket=bucket, Policy=json.dumps(p["policy"], sort_keys=True))
    module.exit_json(changed=created or lifecycle_changed or policy_changed or tags_changed,
                     created=created, lifecycle_changed=lifecycle_changed,
                     policy_changed=policy_changed, tags_changed=tags_changed,
                     diff={"before": {"rules": normalise(current), "policy": policy,
                                      "tags": tags},
                           "after": {"rules": normalise(wanted), "policy": p["policy"],
                                     "tags": tags | wanted_tags}})


def canonical(policy: dict[str, Any] | None) -> str:
    """One spelling of a policy: a lone string and a one-item list are the same value."""
    def norm(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: norm(v) for k, v in value.items()}
        if isinstance(value, list):
            items = sorted((norm(v) for v in value), key=lambda v: json.dumps(v, sort_keys=True))
            return items[0] if len(items) == 1 else items
        return value
    return json.dumps(norm(policy), sort_keys=True)

if __name__ == "__main__":
    main()
