"""up and down: their options; the runs are deploy_kit.flows (converge, upgrade, down)."""

from __future__ import annotations

from typing import Annotated

import typer

from deploy_kit.cli.option_group import PLAYBOOK_RUN, option_group
from deploy_kit.cli.options import InventoryOpt, WaitLockOpt
from deploy_kit.flows.request import AnsibleOptions, ConnectionOptions, VaultOptions


@option_group(PLAYBOOK_RUN)
def up(inventory: InventoryOpt, vault: VaultOptions, ansible: AnsibleOptions,
       connection: ConnectionOptions, listing: tuple[str, ...],
       restart_serving: Annotated[bool, typer.Option(
           "--restart-serving", help="restart every running LMCache server and vLLM, one "
                                     "host at a time behind the health gate, even when "
                                     "nothing changed (after `cache purge` or lifecycle "
                                     "expiry: LMCache forgets the objects it believed in "
                                     "S3)")] = False,
       full: Annotated[bool, typer.Option(
           "--full", help="converge every host, also those whose last converge still holds "
                          "(by default a re-run leaves them out: same inputs, no watched "
                          "file changed, every unit that ran still active)")] = False,
       wait_lock: WaitLockOpt = 0.0,
       canary: Annotated[str | None, typer.Option(
           "--canary", metavar="HOST",
           help="with an upgrade pending: the host its tier upgrades first (default: the "
                "tier's first moving host); with --restart-serving and no upgrade: stage "
                "the restart, this host first")] = None,
       no_canary: Annotated[bool, typer.Option(
           "--no-canary", help="with an upgrade pending: no canary wave, batches at once")
       ] = False,
       batch: Annotated[str | None, typer.Option(
           "--batch", metavar="N|N%",
           help="serving hosts per wave after the canary, a count or a share of the tier "
                "[default: 10%]; gateways and Consul servers go one at a time")] = None,
       pause_after_canary: Annotated[bool, typer.Option(
           "--pause-after-canary",
           help="stop (exit 0) once the canary is upgraded and verified; the same `up` "
                "again goes on from there")] = False) -> None:
    """Converge: pools, gateways, S3 user/bucket, Consul, CoreDNS, resolvers, LMCache, vLLM.
    A re-run leaves out each host whose last converge still holds (--full: none).

    A version change (each host's converge record against the inventory) rolls as a flow:
    a canary host per tier, verified, then the rest in batches, each verified before the
    next; a failure stops it (exit 4, or 6 for a failed verify) and the same command
    resumes (docs/day2.md#upgrades)."""
    from deploy_kit.flows.upgrade import FlowOptions, converge_up

    run_vars: dict[str, object] = {
        name: True for name, on in (("deploykit_restart_serving", restart_serving),
                                    ("deploykit_full", full)) if on}
    converge_up(inventory, vault, ansible, run_vars, connection, listing, wait_lock,
                FlowOptions(canary, no_canary, batch, pause_after_canary))


@option_group(PLAYBOOK_RUN, without=("tags", "skip_tags", "diff"))
def down(inventory: InventoryOpt, vault: VaultOptions, ansible: AnsibleOptions,
         connection: ConnectionOptions, listing: tuple[str, ...],
         yes: Annotated[bool, typer.Option(
             "--yes", "-y", help="do not ask before stopping services")] = False,
         destroy_data: Annotated[bool, typer.Option(
             "--yes-i-really-mean-it", help="also delete the bucket, S3 user and pools")] = False,
         wait_lock: WaitLockOpt = 0.0) -> None:
    """Remove what `up` created; data (pools, bucket) only with --yes-i-really-mean-it.
    Asks first (stopping the gateways and vLLM drops service) unless --yes or --check."""
    from deploy_kit.flows.down import down as run_down

    def ask(question: str) -> None:
        import sys

        if not sys.stdin.isatty():
            raise typer.BadParameter("down stops services on every host it names; pass --yes "
                                     "(or --check to see what it would do)", param_hint="--yes")
        typer.confirm(question, abort=True)

    # --yes-i-really-mean-it is an answer too
    quiet = yes or destroy_data or ansible.check or ansible.print_command or listing
    run_down(inventory, vault, ansible, connection, listing, wait_lock, destroy_data,
             None if quiet else ask)
