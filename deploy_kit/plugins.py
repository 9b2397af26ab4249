"""Optional extensions found through entry points, so the product never imports them.

`deploykit.plugins` adds verbs (a Typer app per entry, named by the entry); the local lab
(`deploykit-lab`, deploykit-lab/ in this repository) registers `deploykit lab` this way.
`deploykit.roundtrip_drivers` supplies a local driver for `verify --roundtrip` (the lab runs
LMCache inside a serving host's network namespace); without one the round trip goes over SSH.
A plugin that fails to load is skipped with one warning line on stderr: the product's own
verbs, and `--version`, never depend on another distribution importing cleanly.
"""

from __future__ import annotations

import sys
from importlib.metadata import EntryPoint, entry_points
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the round trip module is heavy; only its type is needed here
    from deploy_kit.verify.roundtrip import LocalDriver

VERBS = "deploykit.plugins"
ROUNDTRIP_DRIVERS = "deploykit.roundtrip_drivers"


def load(ep: EntryPoint) -> Any | None:
    """The entry point's object, or None after one warning line on stderr naming it."""
    try:
        return ep.load()
    except Exception as error:  # whatever its import raises is the plugin's fault, not ours
        detail = (str(error).splitlines() or [""])[0]
        print(f"deploykit: warning: plugin {ep.group} {ep.name} = {ep.value} not loaded: "
              f"{type(error).__name__}: {detail}", file=sys.stderr)
        return None


def verbs() -> dict[str, Any]:
    """name -> Typer app, for every installed plugin that loads (none in a plain install)."""
    loaded = {ep.name: load(ep) for ep in entry_points(group=VERBS)}
    return {name: app for name, app in loaded.items() if app is not None}


def roundtrip_driver() -> LocalDriver | None:
    """The first installed local driver that loads; it returns None for a host it cannot
    run."""
    for ep in sorted(entry_points(group=ROUNDTRIP_DRIVERS), key=lambda e: e.name):
        driver: LocalDriver | None = load(ep)
        if driver is not None:
            return driver
    return None
