"""status: what runs where, at which version, who is in DNS and Consul; a view, not a check."""

from __future__ import annotations

import time
from typing import Annotated

import typer

from deploy_kit.cli.option_group import READER, option_group
from deploy_kit.cli.options import InventoryOpt, LimitOpt
from deploy_kit.console import console, data_console, stdout
from deploy_kit.core.errors import HostsUnreachable
from deploy_kit.flows.request import ConnectionOptions, VaultOptions, reached_site

SCHEMA_VERSION = 1


@option_group(READER)
def status(inventory: InventoryOpt, vault: VaultOptions, connection: ConnectionOptions,
           as_json: Annotated[bool, typer.Option(
               "--json", help="every host's units, versions, membership, breaker and converge "
                              "record as JSON")] = False,
           limit: LimitOpt = None) -> None:
    """Show each host's deploykit units and their state, the versions it runs, its DNS and
    Consul membership, the LMCache S3 breaker and its last converge; exit 5 when a host could
    not be read.

    Reads only, in one pass (one script per host through Ansible, as verify): no lock, so it
    runs beside `up`. A failed unit or a tripped breaker is shown, not an error; the versions
    table marks a component `mixed` when hosts run different versions of it."""
    from deploy_kit.config.selection import SelectionError, limited_hosts
    from deploy_kit.status import view
    from deploy_kit.status.gather import gather
    from deploy_kit.status.model import payload

    with reached_site(inventory, vault, connection) as site:
        try:
            reach = limited_hosts(site, limit) if limit else None
        except SelectionError as exc:
            raise typer.BadParameter(str(exc), param_hint="--limit") from None
        started = time.monotonic()
        with console().status(f"reading {len(reach or site.hosts)} host(s)…"):
            seen = gather(site, reach)
        elapsed = time.monotonic() - started
        if as_json:
            from deploy_kit.core.envelope import dumps

            stdout().write(dumps("status", SCHEMA_VERSION, site.name,
                                 {**payload(seen), "seconds": round(elapsed, 1)}))
        else:
            view.show(seen, data_console())
            read = len(seen.hosts) - len(seen.unreachable)
            console().print(f"{read} of {len(seen.hosts)} host(s) read in {elapsed:.1f} s",
                            style="dim")
    if seen.unreachable:
        raise HostsUnreachable(
            "unreachable: " + "; ".join(f"{h}: {why}" for h, why in
                                        sorted(seen.unreachable.items())),
            hint="the other hosts are shown above; the inventory's connection settings are "
                 "used as by `deploykit up`")
