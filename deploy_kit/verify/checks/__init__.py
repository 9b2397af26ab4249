"""Importing this package registers every check (one module per area)."""

from deploy_kit.verify.checks import (  # noqa: F401
    breakeven,
    cache_hits,
    ceph,
    consul,
    degraded,
    dns,
    remote_tier,
    router,
    s3,
    s3_privilege,
    serving,
    side_door,
    teams,
    tls,
)
