"""Text every writer can encode: YAML's "\\ud800" escape, JSON's, or a byte that is not
UTF-8 (in argv, an INI or script inventory) reaches Python as a lone surrogate, which no
file, argv, JSON or terminal writer can encode. Inputs are checked here at the edge, and
named without being quoted (a value may be a secret)."""

from __future__ import annotations

from typing import Any


def encodable(text: str) -> bool:
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def shown_name(name: str) -> str:
    """A name as a message can print it: an unencodable character as its \\u escape."""
    return name if encodable(name) else ascii(name)[1:-1]


def first_unencodable(value: Any, path: str, seen: dict[int, str | None]) -> str | None:
    """The dotted path below `value` of its first unencodable key or string, else None
    (each shared container is walked once: group_vars values are one object for all their
    hosts)."""
    if isinstance(value, str):
        return None if encodable(value) else path
    if not isinstance(value, dict | list | tuple):
        return None
    if id(value) in seen:
        found = seen[id(value)]
        return None if found is None else path + found
    seen[id(value)] = None
    below: str | None = None
    items = value.items() if isinstance(value, dict) else enumerate(value)
    for key, item in items:
        step = (f".{shown_name(key)}" if isinstance(key, str) else f"[{key!r}]")
        if isinstance(key, str) and not encodable(key):
            below = step
            break
        found = first_unencodable(item, "", seen)
        if found is not None:
            below = step + found
            break
    seen[id(value)] = below
    return None if below is None else path + below
