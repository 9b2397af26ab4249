"""Optional extensions found through entry points, so the product never imports them.

`deploykit.plugins` adds verbs (a Typer app per entry, named by the entry); the local lab
(`deploykit-lab`, deploykit-lab/ in this repository) registers `deploykit lab` this way.
`deploykit.roundtrip_drivers` supplies a local driver for `verify --roundtrip` (the lab runs
LMCache inside a serving host's network namespace); without one the round trip goes over SSH.
"""

from __future__ import annotations

from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the round trip module is heavy; only its type is needed here
    from deploy_kit.verify.roundtrip import LocalDriver

VERBS = "deploykit.plugins"
ROUNDTRIP_DRIVERS = "deploykit.roundtrip_drivers"


def verbs() -> dict[str, Any]:
    """name -> Typer app, for every installed plugin (none in a plain install)."""
    return {ep.name: ep.load() for ep in entry_points(group=VERBS)}


def roundtrip_driver() -> LocalDriver | None:
    """The first installed local driver; it returns None for a host it cannot run."""
    for ep in sorted(entry_points(group=ROUNDTRIP_DRIVERS), key=lambda e: e.name):
        driver: LocalDriver = ep.load()
        return driver
    return None
