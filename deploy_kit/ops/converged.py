"""The converge record's inputs for one host (plugins/modules/deploykit_converged.py): what
plan/watch.py says the host's record watches, plus the versions it runs (plan/upgrade.py)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from deploy_kit.config.site import Host
from deploy_kit.plan.upgrade import host_versions
from deploy_kit.plan.watch import breaker, cluster_probes, watched_paths, watched_units

# breaker stays importable here: the heal agent's test compares its units with this module's
__all__ = ["breaker", "watch"]


def watch(host: Host, rendered: Iterable[str]) -> dict[str, Any]:
    units, pattern = breaker(host)
    return {
        "paths": watched_paths(host, rendered),
        "units": watched_units(host),
        "probes": cluster_probes(host),
        "breaker_units": units,
        "breaker_pattern": pattern,
        # what the host runs once converged: an upgrade is a record whose versions differ
        # from the inventory's (plan/upgrade.py)
        "versions": host_versions(host),
    }
