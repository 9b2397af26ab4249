"""Importing this package registers every check (one module per area)."""

from deploy_kit.verify.checks import ceph, consul, dns, s3, serving, tls  # noqa: F401
