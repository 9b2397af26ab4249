"""YAML that ships with deploykit (its data files, roles and argument specs): parsed with
libyaml where PyYAML has it. The pure-Python parser made reading these files most of a
re-run's own CPU time; inventories and hosts' answers keep PyYAML's safe loader and its
messages (config/, verify/probes)."""

from __future__ import annotations

from typing import Any

import yaml

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load(text: str) -> Any:
    """What yaml.safe_load returns for `text` (same tags, same types)."""
    return yaml.load(text, Loader=_LOADER)
