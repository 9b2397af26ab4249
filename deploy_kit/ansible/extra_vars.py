"""`-e` for up/down (`@file`, `key=value`, a YAML/JSON mapping, as ansible-playbook reads
them): Ansible knobs pass, deploykit settings are refused.

The roles copy files rendered before Ansible starts, so an extra var that names a deploykit
setting could change a role's branch but never the files it installs. Refusing it keeps one
source of truth (the inventory) and says where the value belongs.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from deploy_kit.config.models import OWNED_PREFIXES
from deploy_kit.config.vault import VaultSecrets
from deploy_kit.core.errors import InventoryError, Problem
from deploy_kit.core.text import first_unencodable
from deploy_kit.safe_read import load_yaml, read_text

# Set by deploykit itself for each run, never by an inventory, and never by -e either: an
# operator's -e comes after deploykit's own and would win (`down --yes -e
# deploykit_destroy_data=true` deleted the data without --yes-i-really-mean-it; `up -e
# deploykit_render_dir=…` swapped the validated files for any directory).
RUN_VARS = {
    "deploykit_destroy_data": "to delete the bucket, S3 user and pools, run `deploykit down "
                              "--yes-i-really-mean-it`",
    "deploykit_render_dir": "deploykit renders and validates the files it installs itself; "
                            "to look at them, run `deploykit render -o DIR`",
}
# vllm_serial is a setting but also the one the CLI passes as a run var; still refused in -e:
# set it in the inventory, where `plan` sees it too.
MAX_VARS_FILE = 4 << 20


# `_`: every name the render computes (settings.json's `_<role>_*`, the site facts
# `_deploykit_site`, the loaded marker `_deploykit_settings_loaded`) and every name a role
# registers (`__<role>_*`). An extra var outranks include_vars, so one of these in -e would
# replace what deploykit rendered and validated (`_deploykit_settings_loaded=true`: every
# role on raw inventory values).
INTERNAL_PREFIX = "_"
VAULT_HEADER = "$ANSIBLE_VAULT;"


def owned_keys(data: Any) -> list[str]:
    if not isinstance(data, dict):
        return []
    return sorted(str(k) for k in data
                  if str(k).startswith((*OWNED_PREFIXES, INTERNAL_PREFIX)))


def key_problems(where: str, data: Any) -> list[Problem]:
    """One problem per deploykit key an -e mapping sets (a run variable, a role-internal
    name, or a setting), and one for a name or value that is not encodable text."""
    problems: list[Problem] = []
    found = first_unencodable(data, "", {}) if isinstance(data, dict) else None
    if found is not None:
        problems.append(Problem(where, found.lstrip(".") or "(value)",
                                "is not valid Unicode text (a lone surrogate)",
                                "remove it: ansible-playbook cannot encode it"))
    for key in owned_keys(data):
        if key.startswith(INTERNAL_PREFIX):
            problems.append(Problem(where, key, "is a name deploykit's roles keep for "
                                    "themselves; -e cannot set it",
                                    "remove it (set deploykit settings in the inventory)"))
        elif key in RUN_VARS:
            problems.append(Problem(where, key, "is set by deploykit for each run; -e cannot "
                                    "change it", RUN_VARS[key]))
        else:
            problems.append(Problem(
                where, key, "is a deploykit setting; -e cannot reach the rendered files",
                "set it in the inventory (group_vars/ or host_vars/) and rerun"))
    return problems


def inline_vars(text: str) -> dict[str, Any]:
    """One inline -e value as Ansible reads it: a YAML/JSON mapping when it starts with `{`,
    else `key=value` pairs (ansible.parsing.splitter.parse_kv, quoting included)."""
    if len(text) > MAX_VARS_FILE:
        raise ValueError(f"is {len(text):,} characters long (limit {MAX_VARS_FILE:,})")
    if text.lstrip().startswith("{"):
        # bounded like a vars file: no nesting (RecursionError) or alias bomb reaches Ansible
        data, _ = load_yaml(text)
        if not isinstance(data, dict):
            raise ValueError("is not a mapping")
        return data
    from ansible.parsing.splitter import parse_kv

    pairs = parse_kv(text)
    if "_raw_params" in pairs or not pairs:
        if Path(text).is_file():  # ansible-playbook reads a file only with the @
            raise ValueError(f"names a file: write -e @{text}")
        raise ValueError("is neither key=value pairs nor a mapping")
    return dict(pairs)


def unreadable_why(exc: Exception) -> str:
    """Why a value or file could not be read, without any of its text (a YAML error's
    message quotes the line it stopped at, which may hold a secret): the kind of error and
    where."""
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        # the reader's words, without what they quote (a character, a tag, an alias)
        problem = re.sub(r"'[^']*'|\"[^\"]*\"", "…", exc.problem or "").strip()
        return f"is not valid YAML{where}" + (f": {problem}" if problem else "")
    if isinstance(exc, yaml.YAMLError):
        return "is not valid YAML"
    if isinstance(exc, UnicodeError):
        return "is not valid UTF-8 text"
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def check_inline_vars(values: tuple[str, ...]) -> None:
    """Exit 3 (nothing contacted) when an inline -e value is unreadable or sets a setting.
    A value is named by its place, never quoted: it may be a secret."""
    problems: list[Problem] = []
    for number, text in enumerate(values, 1):
        where = f"--extra-vars #{number}"
        try:
            data = inline_vars(text)
        except (ValueError, yaml.YAMLError) as exc:
            problems.append(Problem(where, "(value)", unreadable_why(exc),
                                    "give key=value pairs, a {…} mapping, or @file"))
            continue
        problems += key_problems(where, data)
    if problems:
        raise InventoryError(problems)


def check_extra_vars(paths: tuple[Path, ...], vault: VaultSecrets | None = None) -> None:
    """Exit 3 (nothing contacted) when a vars file sets a deploykit setting or is unreadable.
    A vault-encrypted file is decrypted with the run's vault secrets, as ansible-playbook
    does (refused, naming the vault ids, when they cannot); `vault` None: not known yet,
    such a file is left to the check made once they are."""
    problems: list[Problem] = []
    for path in paths:
        try:  # bounded like every inventory file: no FIFO wait, no size or nesting bomb
            text = read_text(path, MAX_VARS_FILE)
            if text.lstrip().startswith(VAULT_HEADER):
                if vault is None:
                    continue
                text = vault.decrypt(text, str(path), "--extra-vars")
            data, _ = load_yaml(text)
        except InventoryError as exc:
            problems += exc.problems
            continue
        except (OSError, ValueError, yaml.YAMLError) as exc:
            problems.append(Problem(str(path), "--extra-vars",
                                    f"cannot read: {unreadable_why(exc)}",
                                    "pass a readable YAML or JSON mapping"))
            continue
        if data is not None and not isinstance(data, dict):
            problems.append(Problem(str(path), "--extra-vars", "is not a mapping",
                                    "write `key: value` lines"))
        problems += key_problems(str(path), data)
    if problems:
        raise InventoryError(problems)
