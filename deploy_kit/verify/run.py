"""One verify pass over a site: the checks chosen, the hosts a --limit allows read, the
findings evaluated. The CLI (`deploykit verify`, `doctor`) and the collection's
`deploykit_verify` action both run it, so a limit means the same in both."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from deploy_kit.config.site import Site
from deploy_kit.verify.model import Finding, Observation


@dataclass
class VerifyPass:
    site: Site  # narrowed to the limit: what a round trip may use too
    observation: Observation
    findings: list[Finding]


def verify_pass(site: Site, requested: list[str] | None, limit: str | None,
                storage_result: Path) -> VerifyPass:
    """Raises SelectionError for an unknown check id or a limit that names nothing, before
    any host is contacted. With a limit only those hosts are contacted; checks that need
    others skip, saying why."""
    import deploy_kit.verify.checks  # noqa: F401  (registers the checks)
    from deploy_kit.config.selection import check_ids, limited_hosts
    from deploy_kit.verify.gather import gather, storage_measurement
    from deploy_kit.verify.model import CHECKS, evaluate

    only = check_ids(requested, list(CHECKS))
    chosen = limited_hosts(site, limit) if limit else None
    observation = gather(site, reach=chosen)
    if chosen is not None:
        site = site.limit(chosen)
    observation.storage = storage_measurement(storage_result, site.name)
    return VerifyPass(site, observation, evaluate(observation, only))
