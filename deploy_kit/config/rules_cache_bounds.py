"""Rules on the cache bucket's bounds (registered by importing this module from rules.py)."""

from __future__ import annotations

from collections.abc import Iterator

from deploy_kit.config.rules import rule
from deploy_kit.config.site import Site
from deploy_kit.core.errors import Problem


@rule
def expiry_or_quota(site: Site) -> Iterator[Problem]:
    """No expiry needs a quota: lifecycle expiry and the bucket quota are the cache's only
    bounds, and an unbounded bucket on a shared Ceph cluster fills the OSDs of every tenant."""
    from deploy_kit.render.s3_access import quota_bytes

    s = site.settings
    if not site.group("ceph_admin") or s.ceph_rgw_s3_lifecycle_days or quota_bytes(site):
        return
    why = ("ceph_rgw_s3_quota_bytes is 0" if s.ceph_rgw_s3_quota_bytes == 0
           else "plan knows no model to size a quota from")
    yield Problem(site.settings_source("ceph_rgw_s3_lifecycle_days"),
                  "ceph_rgw_s3_lifecycle_days",
                  f"0 (no expiry) without a bucket quota ({why}): the bucket grows until "
                  "Ceph is full",
                  "set ceph_rgw_s3_lifecycle_days: 1 or more, or ceph_rgw_s3_quota_bytes: "
                  "<bytes> (unset, plan's bytes for deploykit_cache_target_tokens)")
