"""remove: take hosts out of a running site, one at a time, before they leave the inventory."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from deploy_kit.cli.converge_cmds import WaitLockOpt, listing_flags, run_playbook
from deploy_kit.cli.options import (
    AnsibleOptions,
    AskBecomeOpt,
    AskVaultOpt,
    BecomeOpt,
    BecomeUserOpt,
    CheckOpt,
    ConnectionOptions,
    ExtraOpt,
    ForksOpt,
    InventoryOpt,
    ListHostsOpt,
    ListTasksOpt,
    PrintOpt,
    PrivateKeyOpt,
    UserOpt,
    VaultIdOpt,
    VaultOptions,
    VaultPasswordFileOpt,
    VerboseOpt,
)
from deploy_kit.config.site import Site
from deploy_kit.console import console


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
           vault_id: VaultIdOpt = None, vault_password_file: VaultPasswordFileOpt = None,
           check: CheckOpt = False, extra_vars: ExtraOpt = None,
           print_command: PrintOpt = False, verbose: VerboseOpt = 0,
           become: BecomeOpt = False, forks: ForksOpt = None,
           ask_vault_pass: AskVaultOpt = False, ask_become_pass: AskBecomeOpt = False,
           become_user: BecomeUserOpt = None, user: UserOpt = None,
           private_key: PrivateKeyOpt = None, list_hosts: ListHostsOpt = False,
           list_tasks: ListTasksOpt = False, wait_lock: WaitLockOpt = 0.0) -> None:
    """Take hosts out of a running site one at a time: out of DNS and HAProxy first, then
    out of Consul, services stopped and disabled, converge record forgotten; data kept.

    Then delete the hosts from the inventory (`up` while they are still there adds them
    back). Refuses what would break the site: the last gateway, DNS server or Consul
    server. Asks first unless --yes or --check."""
    from deploy_kit.plan.removal import check_hosts, refuse, steps

    listing = listing_flags(list_hosts, list_tasks)
    options = AnsibleOptions.of(check=check, extra_vars=extra_vars,
                                print_command=print_command, verbose=verbose, become=become,
                                forks=forks)
    ask = not (yes or check or print_command or listing)
    if ask and not sys.stdin.isatty():  # before the inventory is even read: nothing to ask
        raise typer.BadParameter("remove stops services on the hosts it names; pass --yes "
                                 "(or --check to see what it would do)", param_hint="--yes")
    named: list[tuple[str, ...]] = []

    def confirm(site: Site) -> None:
        names = check_hosts(site, hosts)
        for lifted in refuse(site, names, force):
            console().print(f"[yellow]--force:[/] {lifted.message}")
        named.append(names)
        if not ask:
            return
        for name in names:
            console().print(f"[bold]{name}[/] ({', '.join(sorted(site.hosts[name].groups))})")
            for step in steps(site, name, purge_data):
                console().print(f"  - {step}")
        typer.confirm(f"take {len(names)} host(s) out of {site.inventory_source}, one at a "
                      "time?", abort=True)

    run_vars: dict[str, object] = {"deploykit_remove_hosts": hosts,
                                   "deploykit_remove_purge": purge_data,
                                   "deploykit_remove_force": force}
    run_playbook("remove", "remove.yml", inventory,
                 VaultOptions.of(vault_id, vault_password_file, ask_vault_pass), options,
                 run_vars, ConnectionOptions(ask_become_pass=ask_become_pass,
                                             become_user=become_user, user=user,
                                             private_key=private_key),
                 listing, wait_lock, before=confirm)
    if not (check or print_command or listing):
        console().print(
            f"removed {', '.join(named[0] if named else hosts)}: now delete "
            f"{'it' if len(hosts) == 1 else 'them'} from the inventory (a `deploykit up` "
            "while still there converges them back in)")
