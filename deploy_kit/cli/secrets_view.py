"""What the read-only verbs say about the site's secrets: which ones the next `up` generates,
and where they would live."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape

from deploy_kit.config.site import Site
from deploy_kit.console import console


def note_not_generated(site: Site, out: Console | None = None) -> None:
    """Read-only verbs (validate, plan, render) say what the next `up` would generate and
    warn when the generated secrets are not in the committed vault file; they never write
    the store (the rendered files hold no secret value either)."""
    from deploy_kit.ops import secrets_store

    out = out or console()
    try:
        missing = secrets_store.not_generated(site)
    except secrets_store.StoreLocked:
        out.print(f"secrets: {secrets_store.vault_path(site)} is vault-encrypted and no vault "
                  "secret was given: pass the vault flags to see which secrets it holds",
                  markup=False, soft_wrap=True)
        return
    if missing:
        out.print(f"secrets: {', '.join(missing)} not generated yet: the first `deploykit up` "
                  f"writes them to {secrets_store.store_path(site)} (`deploykit secrets list "
                  f"-i {site.inventory_source}` shows every source)", markup=False,
                  soft_wrap=True)
    warning = secrets_store.warning(site, str(site.inventory_source))
    if warning:
        out.print(f"[yellow]warning:[/] {escape(warning)}", soft_wrap=True)
