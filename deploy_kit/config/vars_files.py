"""Which files Ansible reads for an inventory, found as Ansible finds them, so deploykit
validates exactly those and no others.

- group_vars/<name> and host_vars/<name> (ansible.parsing.dataloader.find_vars_files, as
  the host_group_vars plugin calls it): the first of `<name>`, `<name>.yml`,
  `<name>.yaml`, `<name>.json` that exists wins, the others are never read; a directory
  is walked recursively in sorted order, skipping hidden and `~` files and files with
  other extensions (a `group_vars/all` file hides `group_vars/all.yml`).
- an inventory directory (InventoryManager.parse_source): every entry not hidden, not
  group_vars/host_vars/vars_plugins and not ending in INVENTORY_IGNORE_EXTS is a source,
  subdirectories recursively, and Ansible merges them all.

tests/unit/test_bad_inventories_ansible_view.py holds these against Ansible's own code.
"""

from __future__ import annotations

import os
import re
import stat
from functools import cache
from pathlib import Path

import yaml

from deploy_kit.config.raw import VAULT_HEADER
from deploy_kit.core.errors import Problem
from deploy_kit.safe_read import (
    MAX_INVENTORY_BYTES,
    UnreadableFile,
    UnusableValues,
    load_yaml,
    read_text,
    source_problem,
)

# ansible.constants.YAML_FILENAME_EXTENSIONS, with '' first as find_vars_files puts it
VARS_EXTENSIONS = ("", ".yml", ".yaml", ".json")


def ansible_vars_files(base: Path, name: str, specials: bool = True) -> list[Path]:
    """The files Ansible reads for group or host `name` in `base` (a group_vars/ or
    host_vars/ directory), in the order it applies them. specials: also a FIFO, device
    or socket inside a vars directory, which Ansible skips silently: never meant, so
    deploykit's reader names it instead."""
    if name.startswith(os.sep):  # host_group_vars skips 'chroot'-style names
        return []
    stem = os.path.join(base, name)
    for ext in VARS_EXTENSIONS:
        full = stem + ext
        if os.path.exists(full):
            return _dir_vars_files(full, specials) if os.path.isdir(full) else [Path(full)]
    return []


def _dir_vars_files(path: str, specials: bool = True) -> list[Path]:
    found: list[Path] = []
    for entry in sorted(os.listdir(path)):
        if entry.startswith(".") or entry.endswith("~"):
            continue
        ext = os.path.splitext(entry)[1]
        full = os.path.join(path, entry)
        if os.path.isdir(full):
            found += _dir_vars_files(full, specials) if not ext else []
        elif ext in VARS_EXTENSIONS and (os.path.isfile(full) or
                                         (specials and os.path.exists(full))):
            found.append(Path(full))
    return found


def every_vars_file(root: Path) -> list[Path]:
    """Every file under root/group_vars and root/host_vars Ansible could read for some
    name (used to still report syntax errors when the host list itself is broken)."""
    found: list[Path] = []
    for sub in ("group_vars", "host_vars"):
        base = root / sub
        if base.is_dir():
            found += _dir_vars_files(str(base))
    return found


@cache
def _ignored() -> re.Pattern[str]:
    """ansible.inventory.manager.IGNORED, from the same settings (ansible.cfg, env)."""
    from ansible import constants as C

    always = [r"^\.", "^host_vars$", "^group_vars$", "^vars_plugins$"]
    patterns = [str(p) for p in C.INVENTORY_IGNORE_PATTERNS]
    exts = [f"{re.escape(str(x))}$" for x in C.INVENTORY_IGNORE_EXTS]
    return re.compile("|".join(always + patterns + exts))


def directory_sources(directory: Path) -> list[Path]:
    """Every inventory source Ansible parses in `directory` (files, depth first, sorted)."""
    found: list[Path] = []
    ignored = _ignored()
    try:
        entries = sorted(os.listdir(directory))
    except OSError:
        return []
    for entry in entries:
        if ignored.search(entry):
            continue
        full = directory / entry
        found += directory_sources(full) if full.is_dir() else [full]
    return found


def _trusted_top(root: Path) -> Path:
    """How far links in an inventory may point: the repository holding it (shared
    group_vars linked from inventories/<env>/ are common), else the inventory itself."""
    top = root.resolve()
    for candidate in (top, *top.parents):
        if (candidate / ".git").exists():
            return candidate
    return top


def link_outside(path: Path, root: Path) -> Path | None:
    """Where `path` really is when a link (the file or a directory on the way) takes it out
    of the inventory's repository (or the inventory, outside any repository), else None."""
    real = path.resolve()
    return None if _trusted_top(root) in real.parents else real


def blocking_source(path: Path) -> str | None:
    """Why Ansible must not be handed this inventory source file: it would block on it
    (a FIFO, a device), read it whole (over 4 MiB), or expand it without bound (YAML
    aliases, nesting). None for anything else, unparseable files included: Ansible
    only warns about those."""
    try:
        info = path.stat()
    except OSError:
        return None  # a dangling link: Ansible skips it with a warning
    if not stat.S_ISREG(info.st_mode):
        return source_problem(path)
    if info.st_size > MAX_INVENTORY_BYTES:
        return f"is {info.st_size:,} bytes (limit {MAX_INVENTORY_BYTES:,})"
    if path.suffix not in (".yml", ".yaml", ".json"):
        return None
    try:
        load_yaml(read_text(path))
    except UnusableValues as exc:
        return f"cannot be read: {exc}"
    except UnreadableFile as exc:
        return f"cannot be read: it {exc}"
    except yaml.YAMLError:
        return None
    return None


def vars_file_problems(sources: list[Path], groups: list[str], hosts: list[str]
                       ) -> list[Problem]:
    """What is wrong with the group_vars/host_vars files Ansible will read for these
    groups and hosts beside each source, checked as deploykit reads its own inventories
    (regular files, size, links out of the repository, YAML aliases, nesting, numbers,
    duplicate keys) before Ansible's unbounded reader gets them."""
    problems: list[Problem] = []
    seen: set[Path] = set()
    for source in sources:
        base = source if source.is_dir() else source.parent
        for sub, names in (("group_vars", groups), ("host_vars", hosts)):
            folder = Path(os.path.realpath(base / sub))
            if not folder.is_dir():
                continue
            for name in names:
                for path in ansible_vars_files(folder, name):
                    if path not in seen:
                        seen.add(path)
                        problems += _file_problems(path, base)
    return problems


def _file_problems(path: Path, root: Path) -> list[Problem]:
    if (target := link_outside(path, root)) is not None:
        return [Problem(str(path), "(file)", f"is a link to {target}, outside the "
                        "inventory and its repository", "copy the file into the inventory")]
    try:
        text = read_text(path)
    except UnreadableFile as exc:
        return [Problem(str(path), "(file)", f"cannot read: {exc}",
                        "make it a regular UTF-8 YAML file")]
    if text.startswith(VAULT_HEADER):
        return []  # Ansible decrypts it (bounded by the child's limits)
    try:
        data, duplicates = load_yaml(text)
    except UnusableValues as exc:
        return [Problem(str(path), key, why, "write the value as a plain number or quote it "
                        "as text") for key, why in exc.values]
    except UnreadableFile as exc:
        return [Problem(str(path), "(file)", f"cannot use: it {exc}",
                        "flatten the structure / remove the recursive alias")]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        return [Problem(str(path), f"line {mark.line + 1}" if mark else "YAML",
                        f"not valid YAML ({getattr(exc, 'problem', None) or 'syntax'})",
                        "fix the syntax")]
    problems = [Problem(str(path), key, f"defined twice in one mapping (line {line}; YAML "
                        "keeps the last one silently)", "keep one definition")
                for key, line in duplicates]
    if data is not None and not isinstance(data, dict):
        problems.append(Problem(str(path), "(file)", "must be a mapping of variables",
                                "write `key: value` lines"))
    return problems
