"""An inventory as read, before typing: each host's groups and variables with the file each
came from, and the name rule every host and group meets. Both readers build it: deploykit's
own YAML reader (load) and Ansible's inventory API (ansible_inventory)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deploy_kit.core.errors import Problem

VAULT_HEADER = "$ANSIBLE_VAULT"


@dataclass
class RawHost:
    name: str
    groups: set[str] = field(default_factory=set)
    vars: dict[str, Any] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)  # key -> file it came from


@dataclass
class RawInventory:
    root: Path
    hosts_file: Path
    hosts: dict[str, RawHost]
    group_depth: dict[str, int]
    vault_files: set[str]  # vault-encrypted files: the only place a secret may be written
    locked_vault_files: list[str]  # encrypted, no password given: their values are unknown
    plain_vault_files: set[str] = field(default_factory=set)  # vault*.yml not encrypted
    # (file, key) of inline `!vault` values: encrypted where they are written
    vaulted_keys: set[tuple[str, str]] = field(default_factory=set)
    source: Path | None = None  # what Ansible's -i gets (a file inventory); None: root
    problems: list[Problem] = field(default_factory=list)  # load_inventory(collect=True)
    hosts_file_broken: bool = False  # hosts.yml unreadable: no host list to validate
    broken_groups: set[str] = field(default_factory=set)  # groups whose hosts: did not load


# Host and group names become paths (host_vars/<name>.yml, render's OUT/<host>/...):
# letters, digits, '.', '_' and '-', starting with a letter or digit, never '..'.
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$")


def name_problem(name: str) -> str | None:
    """Why an inventory host/group name is refused, or None."""
    if not _NAME.match(name) or ".." in name:
        return (f"{name!r} is not a valid inventory name (letters, digits, '.', '_', '-'; "
                "no '/', no '..', at most 253 characters)")
    return None
