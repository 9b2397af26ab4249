#!/usr/bin/python
"""Ensure an S3 bucket and its lifecycle rules, comparing before writing (runs on the
controller, which has boto3 through deploykit)."""

from __future__ import annotations

from typing import Any

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: deploykit_s3_bucket
short_description: Create an S3 bucket and set its lifecycle rules only when they differ
description: >-
  Creates the bucket when missing and puts the lifecycle configuration only when it differs
  from the one RGW holds; keys are never logged.
options:
  endpoint: {type: str, required: true, description: "http(s)://host:port of one gateway"}
  access_key: {type: str, required: true, no_log: true, description: S3 access key}
  secret_key: {type: str, required: true, no_log: true, description: S3 secret key}
  bucket: {type: str, required: true, description: bucket name}
  region: {type: str, default: default, description: SigV4 region}
  lifecycle: {type: dict, required: true, description: "{Rules: [...]} as in the S3 API"}
  ca_bundle: {type: path, description: "CA file for an https endpoint (the site CA)"}
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
    created = False
    try:
        s3.head_bucket(Bucket=p["bucket"])
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") not in ("404", "NoSuchBucket"):
            module.fail_json(msg=f"HEAD bucket {p['bucket']}: {exc}")
        created = True
        if not module.check_mode:
            s3.create_bucket(Bucket=p["bucket"])
    current: list[dict[str, Any]] = []
    if not created:
        try:
            current = s3.get_bucket_lifecycle_configuration(Bucket=p["bucket"])["Rules"]
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "NoSuchLifecycleConfiguration":
                module.fail_json(msg=f"GET lifecycle of {p['bucket']}: {exc}")
    wanted = p["lifecycle"]["Rules"]
    lifecycle_changed = normalise(current) != normalise(wanted)
    if lifecycle_changed and not module.check_mode:
        s3.put_bucket_lifecycle_configuration(Bucket=p["bucket"],
                                              LifecycleConfiguration={"Rules": wanted})
    module.exit_json(changed=created or lifecycle_changed, created=created,
                     lifecycle_changed=lifecycle_changed,
                     diff={"before": {"rules": normalise(current)},
                           "after": {"rules": normalise(wanted)}})


if __name__ == "__main__":
    main()
