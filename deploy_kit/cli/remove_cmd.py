"""remove: take hosts out of a running site, one at a time, before they leave the inventory."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from deploy_kit.cli.option_group import PLAYBOOK_RUN, option_group
from deploy_kit.cli.options import InventoryOpt, WaitLockOpt
from deploy_kit.flows.request import AnsibleOptions, ConnectionOptions, VaultOptions


@option_group(PLAYBOOK_RUN, after="force", without=("limit", "tags", "skip_tags", "diff"))
def remove(inventory: InventoryOpt,
           hosts: Annotated[list[str], typer.Argument(
               metavar="HOST", show_default=False,
               help="hosts of the inventory to take out (each still in the inventory)")],
           yes: Annotated[bool, typer.Option(
               "--yes", "-y", help="do not ask before taking the hosts out")] = False,
           purge_data: Annotated[bool, typer.Option(
               "--purge-data", help="also delete what `down` deletes on these hosts "
                                    "(configuration, unit files, keyrings, cephx keys, "
                                    "Consul's data); the pools and bucket are never "
                                    "touched")] = False,
           force: Annotated[bool, typer.Option(
               "--force", help="remove even when fewer than a majority of the Consul "
                               "servers would remain, when no other gateway passes in "
                               "Consul, or in static DNS mode")] = False,
           *, vault: VaultOptions, ansible: AnsibleOptions, connection: ConnectionOptions,
           listing: tuple[str, ...], wait_lock: WaitLockOpt = 0.0) -> None:
    """Take hosts out of a running site one at a time: out of DNS and HAProxy first, then
    out of Consul, services stopped and disabled, converge record forgotten; data kept.

    Then delete the hosts from the inventory (`up` while they are still there adds them
    back). Refuses what would break the site: the last gateway, DNS server or Consul
    server. Asks first unless --yes or --check."""
    from deploy_kit.flows.remove import remove_hosts

    ask = not (yes or ansible.check or ansible.print_command or listing)
    if ask and not sys.stdin.isatty():  # before the inventory is even read: nothing to ask
        raise typer.BadParameter("remove stops services on the hosts it names; pass --yes "
                                 "(or --check to see what it would do)", param_hint="--yes")

    def confirm(question: str) -> None:
        typer.confirm(question, abort=True)

    remove_hosts(inventory, hosts, vault, ansible, connection, listing, wait_lock,
                 purge_data, force, confirm if ask else None)
