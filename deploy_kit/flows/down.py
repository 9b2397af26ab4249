"""down: remove what `up` created (data only when asked), after the operator's yes."""

from __future__ import annotations

from collections.abc import Callable

from deploy_kit.flows.converge import refuse_run_vars, run_playbook
from deploy_kit.flows.request import AnsibleOptions, ConnectionOptions, VaultOptions


def down(inventory: list[str], vault: VaultOptions, options: AnsibleOptions,
         connection: ConnectionOptions, listing: tuple[str, ...], lock_wait: float,
         destroy_data: bool, confirm: Callable[[str], None] | None) -> None:
    """`confirm`: asks (or refuses) before services stop; None: do not ask."""
    refuse_run_vars(options)  # before the prompt: `-e deploykit_destroy_data=…` is refused
    if confirm is not None:
        scope = (f"hosts matching {options.limit!r}" if options.limit else
                 "every host of the inventory")
        confirm(f"stop and remove deploykit's services on {scope}"
                + (" AND DELETE THE BUCKET, S3 USER AND POOLS" if destroy_data else "") + "?")
    run_playbook("down", "down.yml", inventory, vault, options,
                 {"deploykit_destroy_data": destroy_data}, connection, listing, lock_wait)
