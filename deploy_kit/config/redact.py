"""No inventory problem quotes a secret: every value written in a vault (a vault-encrypted
file or an inline `!vault` value) or under a credential's name is taken out of the messages
before they are shown, whichever rule (or pydantic's own message) quoted it."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from deploy_kit.config.models import SECRET_KEYS
from deploy_kit.config.raw import RawInventory
from deploy_kit.config.rulebook import SECRET_NAME
from deploy_kit.core.errors import Problem

SHOWN_AS = "<secret>"
MIN_LENGTH = 4  # shorter values (a port, `true`) are words every message uses


def _strings(value: Any, into: set[str], seen: set[int]) -> None:
    if isinstance(value, str):
        if len(value) >= MIN_LENGTH:
            into.add(value)
        return
    if not isinstance(value, dict | list | tuple) or id(value) in seen:
        return
    seen.add(id(value))
    items = [*value.keys(), *value.values()] if isinstance(value, dict) else list(value)
    for item in items:
        _strings(item, into, seen)


def secret_values(raw: RawInventory) -> set[str]:
    """Every string written in a vault or under a credential's name, at any depth."""
    found: set[str] = set()
    seen: set[int] = set()
    hosts_file = str(raw.hosts_file)
    for host in raw.hosts.values():
        for key, value in host.vars.items():
            source = host.sources.get(key, hosts_file)
            if source in raw.vault_files or (source, key) in raw.vaulted_keys or \
                    key in SECRET_KEYS or (isinstance(key, str) and SECRET_NAME.search(key)):
                _strings(value, found, seen)
    return found


def redact(problems: list[Problem], secrets: set[str]) -> list[Problem]:
    """`problems` with each secret (as written, and as repr() escapes it) replaced."""
    forms = {form for s in secrets for form in (s, repr(s)[1:-1]) if form}
    if not forms or not problems:
        return problems
    pattern = re.compile("|".join(re.escape(f) for f in sorted(forms, key=len, reverse=True)))
    def hide(text: str) -> str:
        return pattern.sub(SHOWN_AS, text)

    return [dataclasses.replace(p, file=hide(p.file), key=hide(p.key), message=hide(p.message),
                                fix=hide(p.fix)) for p in problems]
