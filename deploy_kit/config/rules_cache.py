"""Validation rules on the cache bucket's bounds (docs/storage.md)."""

from __future__ import annotations

from collections.abc import Iterator

from deploy_kit.config.rulebook import collector
from deploy_kit.config.site import Site
from deploy_kit.core.errors import Problem

RULES, rule = collector()


def _plan_sizes_a_quota(site: Site) -> bool:
    """Whether `plan` has bytes for the default bucket quota (render/s3_access.py): a
    serving host with a known model and tokens to keep."""
    return any(h.geometry is not None and h.config.deploykit_cache_target_tokens > 0
               for h in site.group("vllm"))


@rule
def expiry_or_quota(site: Site) -> Iterator[Problem]:
    """No expiry needs a quota: lifecycle expiry and the bucket quota are the cache's only
    bounds, and an unbounded bucket on a shared Ceph cluster fills the OSDs of every tenant."""
    s = site.settings
    quota = s.ceph_rgw_s3_quota_bytes
    if not site.group("ceph_admin") or s.ceph_rgw_s3_lifecycle_days or quota \
            or (quota is None and _plan_sizes_a_quota(site)):
        return
    why = ("ceph_rgw_s3_quota_bytes is 0" if quota == 0
           else "plan knows no model to size a quota from")
    yield Problem(site.settings_source("ceph_rgw_s3_lifecycle_days"),
                  "ceph_rgw_s3_lifecycle_days",
                  f"0 (no expiry) without a bucket quota ({why}): the bucket grows until "
                  "Ceph is full",
                  "set ceph_rgw_s3_lifecycle_days: 1 or more, or ceph_rgw_s3_quota_bytes: "
                  "<bytes> (unset, plan's bytes for deploykit_cache_target_tokens)")
