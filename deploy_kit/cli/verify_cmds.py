"""verify and doctor: observe the deployed tier, judge it with pure checks."""

from __future__ import annotations

import os
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from deploy_kit.cli.option_group import READER, option_group
from deploy_kit.cli.options import InventoryOpt, LimitOpt
from deploy_kit.console import console, data_console, stdout
from deploy_kit.flows.request import ConnectionOptions, VaultOptions, reaching


class RoundTripStore(StrEnum):
    s3 = "s3"
    nixl = "nixl"


def unwritable(path: Path) -> str | None:
    """Why a report file cannot be written at `path`, or None."""
    parent = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        return f"{path} is a directory"
    if not parent.is_dir():
        return f"{parent} is not a directory"
    if not os.access(parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        return f"{path} is not writable"
    return None


def _verify(site_name: str | list[str], vault: VaultOptions, requested: list[str] | None,
            as_json: bool, junit: Path | None, verbose: bool, limit: str | None,
            roundtrip: bool = False, roundtrip_store: str | None = None,
            storage_result: Path = Path("runs/bench-storage/storage.json"),
            connection: ConnectionOptions | None = None) -> None:
    from deploy_kit.flows.verify import judge, observe
    from deploy_kit.plugins import roundtrip_driver
    from deploy_kit.verify import report

    if junit is not None and (problem := unwritable(junit)):
        raise typer.BadParameter(problem, param_hint="--junit")  # before any probe
    site, observation, findings = observe(site_name, vault, requested, limit, roundtrip,
                                          roundtrip_store, storage_result, connection,
                                          roundtrip_driver)
    for error in observation.probe_errors:
        console().print(f"[yellow]probe:[/] {escape(error)}")
    if as_json:
        stdout().write(report.to_json(findings, site.name))
    else:
        report.show(findings, data_console(), verbose)
    if junit:
        report.write_junit(findings, junit)
    judge(observation, findings)


def _list_checks(value: bool) -> None:
    """--list-checks: every check id, its area (tags), severity and summary; exit 0."""
    if not value:
        return
    import deploy_kit.verify.checks  # noqa: F401  (registers the checks)
    from deploy_kit.verify.model import CHECKS

    width = max(len(c) for c in CHECKS)
    areas = {c.id: ",".join(c.tags) for c in CHECKS.values()}
    area_width = max(len(a) for a in areas.values())
    out = stdout()
    for c in sorted(CHECKS.values(), key=lambda c: (c.tags[0], c.id)):
        severity = " (warning)" if c.severity == "warning" else ""
        out.write(f"{c.id:<{width}}  {areas[c.id]:<{area_width}}  {c.summary}{severity}\n")
    raise typer.Exit(0)


def _list_symptoms(value: bool) -> None:
    """doctor --list: every symptom doctor recognises, what it means and the checks it
    runs; exit 0."""
    if not value:
        return
    from deploy_kit.verify.doctor import SYMPTOMS

    out = stdout()
    for pattern, why, checks in SYMPTOMS:
        out.write(f"{why}\n  matches: {pattern}\n  checks:  {', '.join(checks)}\n")
    raise typer.Exit(0)


ListChecksOpt = Annotated[bool, typer.Option(
    "--list-checks", is_eager=True, callback=_list_checks,
    help="list every check id with its area and summary, and exit")]


@option_group(READER)
def verify(inventory: InventoryOpt, vault: VaultOptions, connection: ConnectionOptions,
           check: Annotated[list[str] | None, typer.Option(
               "--check", metavar="ID", help="only this check (repeat for several; "
                                              "--list-checks lists them)")] = None,
           as_json: Annotated[bool, typer.Option("--json", help="findings as JSON")] = False,
           junit: Annotated[Path | None, typer.Option("--junit", metavar="FILE",
                                                               help="JUnit XML file")] = None,
           verbose: Annotated[bool, typer.Option("--verbose", "-v", help="show passes")] = False,
           limit: LimitOpt = None,
           roundtrip: Annotated[bool, typer.Option(
               "--roundtrip", help="store a KV chunk with LMCache on one serving host and "
                                   "read it on another")] = False,
           roundtrip_store: Annotated[RoundTripStore | None, typer.Option(
               "--roundtrip-store", metavar="[s3|nixl]",
               help="round trip through this store with each host's settings instead of "
                    "the one it runs (nixl: NIXL's OBJ plugin; needs lmcache[nixl] there)")
           ] = None,
           storage_result: Annotated[Path, typer.Option(
               "--storage-result", metavar="FILE",
               help="the `bench storage` result the break-even check compares with")] = Path(
               "runs/bench-storage/storage.json"),
           list_checks: ListChecksOpt = False) -> None:
    """Check the deployed tier for every known silent failure; exit 6 when a check fails."""
    with reaching(connection) as reach:
        _verify(inventory, vault, check, as_json, junit, verbose, limit, roundtrip,
                roundtrip_store.value if roundtrip_store else None, storage_result, reach)


@option_group(READER)
def doctor(symptom: Annotated[str, typer.Argument(metavar="SYMPTOM",
                                                  help="an error text or symptom")],
           inventory: InventoryOpt, vault: VaultOptions, connection: ConnectionOptions,
           list_symptoms: Annotated[bool, typer.Option(
               "--list", is_eager=True, callback=_list_symptoms,
               help="list every symptom doctor knows and the checks it runs, and "
                    "exit")] = False) -> None:
    """Map a symptom (\"401 Unauthorized\", \"low hit rate\"…) to the checks that explain
    it, and run those."""
    from deploy_kit.verify.doctor import diagnose

    matches = diagnose(symptom)
    ids: list[str] | None = None
    if not matches:
        console().print("no known failure matches; running every check")
    else:
        ids = []
        for why, checks in matches:
            console().print(f"[bold]likely:[/] {why} → {', '.join(checks)}")
            ids += [c for c in checks if c not in ids]
    with reaching(connection) as reach:
        _verify(inventory, vault, ids, False, None, ids is not None, None, connection=reach)
