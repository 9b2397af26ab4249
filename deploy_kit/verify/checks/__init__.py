"""Importing this package registers every check (one module per area)."""

from deploy_kit.verify.checks import cache_hits, ceph, consul, dns, s3, serving  # noqa: F401
