"""Jinja in a setting's value (corpus class 4): Ansible templates it when the play runs,
after deploykit validated the text as a literal, so what runs is never what was checked.

The one form deploykit can follow itself, a whole-value `{{ name }}` reference to another
inventory variable (or an env lookup, load.is_reference), is resolved here and the value it
reaches is validated like any other; every other template (`{{ a ~ b }}`, filters, `{%`,
`{#`, a reference loop, a name no inventory file sets) is refused with a one-line fix.
A string under Ansible's `!unsafe` tag is never templated: it is taken as written.
"""

from __future__ import annotations

import re
from typing import Any

from deploy_kit.config.load import is_reference, resolve_reference
from deploy_kit.config.models import SECRET_KEYS, HostConfig
from deploy_kit.config.raw import RawHost, RawInventory
from deploy_kit.core.errors import Problem
from deploy_kit.safe_read import UnsafeText

_SIMPLE = re.compile(r"^\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}$")
_MARKERS = ("{{", "{%", "{#")
_MAX_HOPS = 9
_SECRETS = frozenset(SECRET_KEYS)
# the magic variables whose value the inventory itself gives
_MAGIC = {"inventory_hostname": lambda rh: rh.name,
          "inventory_hostname_short": lambda rh: rh.name.split(".")[0]}


class _Refused(Exception):
    def __init__(self, problem: Problem | None) -> None:
        self.problem = problem  # None: unknown until Ansible runs (a locked vault, no env)


def settle_vars(rh: RawHost, raw: RawInventory, keys: set[str], problems: list[Problem],
                memo: dict[int, Any] | None = None) -> tuple[dict[Any, Any], bool]:
    """(the host's variables with each of `keys` settled, whether any was refused: the
    host is then left out of the Site, whose rules would see defaults). Secrets are left to
    site._secret_origin; a key whose value is not known yet is left out. `memo` remembers
    which values (one object per vars file, shared by the hosts reading it) hold no
    template, so a big site scans each once."""
    out: dict[Any, Any] = {}
    refused = False
    memo = {} if memo is None else memo
    for key, value in rh.vars.items():
        if key not in keys or key in _SECRETS:
            out[key] = value
            continue
        if isinstance(value, (dict, list)):
            if memo.get(id(value), (None,))[0] is not value:  # the object, not a reused id
                memo[id(value)] = (value, _has_template(value))
            if not memo[id(value)][1]:
                out[key] = value
                continue
        value, known, why = settle(key, value, rh, raw)
        if why is not None:
            problems.append(why)
            refused = True
        if known:
            out[key] = value
    return out, refused


def settle(key: str, value: Any, rh: RawHost, raw: RawInventory
           ) -> tuple[Any, bool, Problem | None]:
    """(value, known, problem): the value with `{{ name }}` references followed, or why it
    cannot be validated. A reference deploykit cannot follow yet (a locked vault, an unset
    env variable) is not known: the key is left out, as secrets are (Ansible decides)."""
    if not _has_template(value):  # the common case: one scan, no copy
        return value, True, None
    try:
        return _walk(key, key, value, rh, raw, rh.sources.get(key, str(raw.hosts_file)),
                     0), True, None
    except _Refused as exc:
        return None, False, exc.problem


def _has_template(value: Any) -> bool:
    if isinstance(value, str):
        return not isinstance(value, UnsafeText) and any(m in value for m in _MARKERS)
    if isinstance(value, dict):
        return any(_has_template(k) or _has_template(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_template(v) for v in value)
    return False


def _walk(key: str, path: str, value: Any, rh: RawHost, raw: RawInventory, src: str,
          depth: int) -> Any:
    if isinstance(value, dict):
        out: dict[Any, Any] = {}
        for k, v in value.items():
            if _has_template(k):
                raise _Refused(_problem(src, f"{path}.{k}", "a template in a key", rh))
            out[k] = _walk(key, f"{path}.{k}", v, rh, raw, src, depth)
        return out
    if isinstance(value, list):
        return [_walk(key, f"{path}[{i}]", v, rh, raw, src, depth) for i, v in enumerate(value)]
    if not _has_template(value):
        return value
    return _follow(key, path, value, rh, raw, src, depth)


def _follow(key: str, path: str, value: str, rh: RawHost, raw: RawInventory, src: str,
            depth: int) -> Any:
    seen: list[str] = []
    while isinstance(value, str) and _has_template(value):
        m = _SIMPLE.match(value)
        if m is None:
            if is_reference(value):  # {{ lookup('env', 'X') }}
                resolved, ok = resolve_reference(value, rh.vars)
                if not ok:
                    raise _Refused(None)
                return resolved
            raise _Refused(_problem(src, path, "is a Jinja template, which Ansible "
                                    "evaluates after deploykit checked it as text", rh))
        name = m.group(1)
        if name in seen or name == key:
            raise _Refused(_problem(rh.sources.get(key, src), key, "references loop: "
                                    f"{' -> '.join([key, *seen, name])} (Ansible fails on "
                                    "a recursive template)", rh,
                                    fix="give one of them the value itself"))
        seen.append(name)
        if len(seen) > _MAX_HOPS:
            raise _Refused(_problem(src, path, "more than 9 `{{ var }}` hops", rh))
        if name in _MAGIC:
            return _MAGIC[name](rh)
        if name not in rh.vars:
            if name in HostConfig.model_fields:  # a role default: the documented value
                return HostConfig.model_fields[name].get_default(call_default_factory=True)
            if raw.locked_vault_files:
                raise _Refused(None)  # a locked vault may set it: Ansible decides
            raise _Refused(_problem(
                src, path, f"references {{{{ {name} }}}}, which no inventory file sets "
                "(a fact or -e value is known only when the play runs)", rh,
                fix=f"give the value itself, or set {name} in the inventory"))
        value = rh.vars[name]
        src = rh.sources.get(name, str(raw.hosts_file))
        path = f"{name} (reached from {key})" if name != key else name
    if depth < _MAX_HOPS and isinstance(value, (dict, list)):
        return _walk(key, path, value, rh, raw, src, depth + 1)
    return value


def _problem(src: str, path: str, why: str, rh: RawHost, fix: str = "") -> Problem:
    return Problem(src, path, why, fix or "write the value itself (deploykit validates "
                   "settings before Ansible templates them), or tag a literal `!unsafe`",
                   hosts=(rh.name,))
