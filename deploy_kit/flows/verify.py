"""verify and doctor: observe the deployed tier (probes through the inventory's connection,
and LMCache's round trip when asked), then judge what was seen."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from deploy_kit.console import console
from deploy_kit.core.errors import BadInput, HostsUnreachable, VerifyFailed
from deploy_kit.flows.request import ConnectionOptions, VaultOptions, on_site

if TYPE_CHECKING:
    from deploy_kit.config.site import Site
    from deploy_kit.verify.model import Finding, Observation
    from deploy_kit.verify.roundtrip import LocalDriver


def observe(site_name: str | list[str], vault: VaultOptions, requested: list[str] | None,
            limit: str | None, roundtrip: bool = False, roundtrip_store: str | None = None,
            storage_result: Path = Path("runs/bench-storage/storage.json"),
            connection: ConnectionOptions | None = None,
            driver: Callable[[], LocalDriver | None] = lambda: None
            ) -> tuple[Site, Observation, list[Finding]]:
    """The site as verified, what the probes saw, and every finding (the round trip's too).
    `driver`: the installed round-trip driver (deploy_kit.plugins), looked up only when a
    round trip is asked for."""
    from deploy_kit.config.selection import SelectionError
    from deploy_kit.ops.secrets_store import with_stored
    from deploy_kit.ops.site import open_site
    from deploy_kit.verify.run import verify_pass

    # the generated secrets (vLLM's API key for the probes) fill what the inventory leaves unset
    site = on_site(with_stored(open_site(site_name, vault.secrets())),
                   connection or ConnectionOptions())
    try:
        with console().status("probing DNS, concentrators, S3, Ceph and serving hosts…"):
            done = verify_pass(site, requested, limit, storage_result)
    except SelectionError as exc:
        raise BadInput(str(exc)) from None
    site, observation, findings = done.site, done.observation, done.findings
    if roundtrip or roundtrip_store:
        from deploy_kit.verify.roundtrip import roundtrip as run_roundtrip

        with console().status("LMCache round trip between two serving hosts…"):
            findings += run_roundtrip(site, driver(), roundtrip_store)
    return site, observation, findings


def judge(observation: Observation, findings: list[Finding]) -> None:
    """Exit 5 for an unreachable host, 6 for a failed check or when nothing was observed."""
    from deploy_kit.verify import report
    from deploy_kit.verify.model import Status

    if observation.unreachable:
        raise HostsUnreachable(
            "unreachable: " + "; ".join(f"{h}: {why}" for h, why in
                                        sorted(observation.unreachable.items())),
            hint="the inventory's connection settings are used as by `deploykit up`")
    if report.failed(findings):
        raise VerifyFailed(f"{len(report.failed(findings))} check(s) failed")
    if not any(f.status != Status.SKIP for f in findings):
        raise VerifyFailed(f"none of the {len({f.check for f in findings})} check(s) "
                           "observed anything: every one skipped",
                           hint="is the site deployed, and are its hosts in this inventory?")
