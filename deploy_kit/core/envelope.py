"""The one JSON envelope of every machine-readable output (`--json`, bench documents):
`schema` (`deploykit-<verb>/<N>`, N raised when a field changes meaning or goes away),
`deploykit_version`, `site`, `generated` (UTC, ISO 8601), then the verb's own fields."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from deploy_kit import __version__

ENVELOPE_KEYS = ("schema", "deploykit_version", "site", "generated")


def envelope(verb: str, version: int, site: str, payload: dict[str, Any]) -> dict[str, Any]:
    clash = sorted(set(payload) & set(ENVELOPE_KEYS))
    if clash:  # a payload never overrides the envelope
        raise ValueError(f"payload of {verb} sets {clash}")
    return {"schema": f"deploykit-{verb}/{version}", "deploykit_version": __version__,
            "site": site, "generated": datetime.now(UTC).isoformat(timespec="seconds"),
            **payload}


def dumps(verb: str, version: int, site: str, payload: dict[str, Any]) -> str:
    return json.dumps(envelope(verb, version, site, payload), indent=2) + "\n"
