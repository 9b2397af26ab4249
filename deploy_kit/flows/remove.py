"""remove: take hosts out of a running site, one at a time (plan/removal.py's rules, then
playbooks/remove.yml)."""

from __future__ import annotations

from collections.abc import Callable

from deploy_kit.config.site import Site
from deploy_kit.console import console
from deploy_kit.flows.converge import run_playbook
from deploy_kit.flows.request import AnsibleOptions, ConnectionOptions, VaultOptions


def remove_hosts(inventory: list[str], hosts: list[str], vault: VaultOptions,
                 options: AnsibleOptions, connection: ConnectionOptions,
                 listing: tuple[str, ...], lock_wait: float, purge_data: bool, force: bool,
                 confirm: Callable[[str], None] | None) -> None:
    """`confirm`: asks (or refuses) once the steps are shown; None: do not ask."""
    from deploy_kit.plan.removal import check_hosts, refuse, steps

    named: list[tuple[str, ...]] = []

    def before(site: Site) -> None:
        names = check_hosts(site, hosts)
        for lifted in refuse(site, names, force):
            console().print(f"[yellow]--force:[/] {lifted.message}")
        named.append(names)
        if confirm is None:
            return
        for name in names:
            console().print(f"[bold]{name}[/] ({', '.join(sorted(site.hosts[name].groups))})")
            for step in steps(site, name, purge_data):
                console().print(f"  - {step}")
        confirm(f"take {len(names)} host(s) out of {site.inventory_source}, one at a time?")

    run_vars: dict[str, object] = {"deploykit_remove_hosts": hosts,
                                   "deploykit_remove_purge": purge_data,
                                   "deploykit_remove_force": force}
    run_playbook("remove", "remove.yml", inventory, vault, options, run_vars, connection,
                 listing, lock_wait, before=before)
    if not (options.check or options.print_command or listing):
        console().print(
            f"removed {', '.join(named[0] if named else hosts)}: now delete "
            f"{'it' if len(hosts) == 1 else 'them'} from the inventory (a `deploykit up` "
            "while still there converges them back in)")
