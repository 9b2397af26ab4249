"""Values YAML hands over that are not what the operator meant, refused per setting before
pydantic's lax mode coerces them silently.

YAML 1.1 and pydantic's lax mode together turn `!!binary` into text, `"yes"`, `1` or
`"off"` into a boolean, `8000.0`, `" 8000 "`, `"8_000"` or `"08000"` into the port 8000,
while Ansible's roles and templates see the original value (`{% if x %}` is true for the
text "false"). And some values no setting can hold break later steps: a 4,000-digit
integer (an OverflowError in any float arithmetic, a ValueError in str()), an infinite
number or a date inside a pass-through mapping (JSON/YAML renderers), a megabyte string.
One rule per kind of setting, for every setting, so a new setting is covered too.
"""

from __future__ import annotations

import datetime
import math
import re
from typing import Any

MAX_TEXT = 16 * 1024  # characters in one string of a setting
INT64 = 2**63 - 1
_CANONICAL_INT = re.compile(r"^-?(0|[1-9][0-9]{0,18})$")
_CANONICAL_FLOAT = re.compile(r"^-?(0|[1-9][0-9]{0,18})(\.[0-9]{1,18})?$")

INT_KINDS = ("<class 'int'>", "int | None", "typing.Optional[int]")
FLOAT_KINDS = ("<class 'float'>", "float | None", "typing.Optional[float]")
BOOL_KINDS = ("<class 'bool'>", "bool | None", "typing.Optional[bool]")


def kind_of(annotation: Any) -> str:
    """int, float, bool or other: what a setting's annotation asks for."""
    text = str(annotation)
    return ("int" if text in INT_KINDS else "float" if text in FLOAT_KINDS else
            "bool" if text in BOOL_KINDS else "other")


def _shown(value: Any) -> str:
    """The value for a message: short text only (a long one might be a misplaced secret)."""
    if isinstance(value, str) and len(value) > 12:
        return f"a text of {len(value):,} characters"
    text = repr(value)
    return text if len(text) <= 40 else text[:30] + "…"


def anywhere_problem(value: Any, depth: int = 0) -> str | None:
    """What no setting may hold at any depth (pass-through mappings and lists included):
    a binary, a timestamp, a non-finite number, an integer past 64 bits, a huge string.
    Messages read '<problem>|<fix>' (models.py's convention)."""
    if isinstance(value, str):
        if len(value) > MAX_TEXT:
            return (f"is a string of {len(value):,} characters (limit {MAX_TEXT:,})|"
                    "shorten it")
        return None
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        if -INT64 <= value <= INT64:
            return None
        digits = int(value.bit_length() * math.log10(2)) + 1
        return (f"is an integer of about {digits:,} digits, beyond any setting's range "
                "(64 bits)|give a number in range")
    if isinstance(value, float):
        return None if math.isfinite(value) else \
            f"is {value}, not a finite number|give a finite number"
    if isinstance(value, bytes | bytearray):
        return "is a YAML binary (!!binary), not text|write it as plain text"
    if isinstance(value, datetime.date | datetime.time):
        return (f"is a YAML timestamp ({value.isoformat()}), not text|quote it "
                "if it is text")
    if depth > 64:
        return None  # safe_read bounds nesting before this (48 levels)
    if isinstance(value, dict):
        for key, item in value.items():
            problem = anywhere_problem(key, depth + 1) or anywhere_problem(item, depth + 1)
            if problem:
                where = str(key)[:40] if isinstance(key, str) else _shown(key)
                return problem if problem.startswith("at ") else f"at {where!r}: {problem}"
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            problem = anywhere_problem(item, depth + 1)
            if problem:
                return problem if problem.startswith("at ") else f"at element {i}: {problem}"
    return None


def edge_value_problem(value: Any, kind: str) -> str | None:
    """Why `value` cannot be a setting of this kind as written, or None (then pydantic
    validates it as usual)."""
    written = getattr(value, "written", None)  # safe_read.YAML11Int
    if isinstance(value, int) and isinstance(written, str):
        return (f"is written {written[:20]!r}, which YAML 1.1 (Ansible) reads as {value} "
                f"({'base 60' if ':' in written else 'octal'}) and YAML 1.2 otherwise|write "
                "the number in plain decimal, without a leading zero")
    if kind == "other":
        return anywhere_problem(value)
    if isinstance(value, str) and ("{{" in value or "{%" in value):
        return anywhere_problem(value)  # a template: the templating rules' to judge
    if kind == "bool":
        if isinstance(value, bool) or value is None:
            return None
        return (f"is {_shown(value)} ({type(value).__name__}), not true or false (a "
                "template would test the value itself: the text 'false' is true)|write "
                "true or false, unquoted (True or False in an INI inventory)")
    if isinstance(value, bool):  # YAML's `yes`/`true` would pass as 1 (a port, a count)
        return (f"is {str(value).lower()}, a boolean where a number belongs|give a number")
    if kind == "int" and isinstance(value, float):
        return (f"is {_shown(value)}, a decimal number where a whole number belongs "
                "(templates would write it with the decimal point)|write a whole number")
    if isinstance(value, str):
        pattern = _CANONICAL_INT if kind == "int" else _CANONICAL_FLOAT
        if pattern.match(value):
            return None
        return (f"is {_shown(value)}, text that is not a plain number (pydantic would read it one "
                "way, Ansible's templates another)|write the number plainly, unquoted")
    return anywhere_problem(value)
