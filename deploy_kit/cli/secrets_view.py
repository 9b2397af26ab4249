"""What the read-only verbs say about the site's secrets: which ones the next `up` generates."""

from __future__ import annotations

from rich.console import Console

from deploy_kit.config.site import Site
from deploy_kit.console import console


def note_not_generated(site: Site, out: Console | None = None) -> None:
    """Read-only verbs (validate, plan, render) say what the next `up` would generate;
    they never write the store (the rendered files hold no secret value either)."""
    from deploy_kit.ops import secrets_store

    missing = secrets_store.not_generated(site)
    if missing:
        (out or console()).print(
            f"secrets: {', '.join(missing)} not generated yet: the first `deploykit up` "
            f"writes them to {secrets_store.store_path(site)} (`deploykit secrets` lists "
            "every source)")
