"""Read an Ansible inventory directory into per-host variables, remembering each key's file.

Precedence follows Ansible: group `all`, then child groups (shallow before deep, then by
name), then the host; within one level, vars inline in hosts.yml lose to group_vars files.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from deploy_kit.errors import InventoryError, Problem

INVENTORY_FILES = ("hosts.yml", "hosts.yaml")
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
    vault_files: set[str]  # files whose values may hold secrets
    locked_vault_files: list[str]  # encrypted, no password given: their values are unknown


def resolve_inventory_path(name_or_path: str, project_dir: Path) -> Path:
    """`prod` -> <project>/inventory/prod; any existing path is used as it is."""
    candidate = Path(name_or_path)
    if candidate.exists():
        return candidate.resolve()
    named = project_dir / "inventory" / name_or_path
    if named.exists():
        return named.resolve()
    raise InventoryError([Problem(str(candidate), "--inventory", "no such inventory",
                                  f"create inventory/{name_or_path}/hosts.yml or pass a path")])


def _read_yaml(path: Path, vault_password: str | None, problems: list[Problem],
               locked: list[str]) -> Any:
    text = path.read_text()
    if text.startswith(VAULT_HEADER):
        if vault_password is None:
            locked.append(str(path))
            return {}
        text = _decrypt(text, vault_password, path, problems)
    try:
        return yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark else "YAML"
        problems.append(Problem(str(path), where, f"not valid YAML ({exc.__class__.__name__})",
                                "fix the syntax"))
        return {}


def _decrypt(text: str, password: str, path: Path, problems: list[Problem]) -> str:
    from ansible.parsing.vault import VaultLib, VaultSecret  # heavy import: only when needed

    try:
        vault = VaultLib([("default", VaultSecret(password.encode()))])
        return str(vault.decrypt(text).decode())
    except Exception:  # ansible raises several types for a bad password or file
        problems.append(Problem(str(path), "vault", "cannot decrypt",
                                "check --vault-password-file"))
        return ""


def _vars_files(base: Path, name: str) -> list[Path]:
    """group_vars/<name>.yml or group_vars/<name>/*.yml (sorted), as Ansible reads them."""
    files: list[Path] = []
    for suffix in ("", ".yml", ".yaml"):
        p = base / f"{name}{suffix}"
        if p.is_file():
            files.append(p)
    d = base / name
    if d.is_dir():
        files += sorted(f for f in d.iterdir() if f.suffix in (".yml", ".yaml") and f.is_file())
    return files


def _walk_groups(name: str, node: dict[str, Any] | None, depth: int, parents: list[str],
                 hosts: dict[str, RawHost], group_vars: dict[str, tuple[dict[str, Any], str]],
                 depths: dict[str, int], hosts_file: str, problems: list[Problem]) -> None:
    node = node or {}
    if not isinstance(node, dict):
        problems.append(Problem(hosts_file, name, "group must be a mapping",
                                "use hosts:/children:/vars: keys"))
        return
    depths[name] = max(depth, depths.get(name, 0))
    if node.get("vars"):
        group_vars[name] = (dict(node["vars"]), hosts_file)
    for host_name, host_vars in (node.get("hosts") or {}).items():
        host = hosts.setdefault(str(host_name), RawHost(str(host_name)))
        host.groups.update([*parents, name])
        for key, value in (host_vars or {}).items():
            host.vars[f"__inline__{key}"] = value
    for child, child_node in (node.get("children") or {}).items():
        _walk_groups(str(child), child_node, depth + 1, [*parents, name], hosts, group_vars,
                     depths, hosts_file, problems)


def load_inventory(path: Path, vault_password: str | None = None) -> RawInventory:
    hosts_file = next((path / f for f in INVENTORY_FILES if (path / f).is_file()), None)
    if hosts_file is None:
        raise InventoryError([Problem(str(path), "hosts.yml", "missing",
                                      "write an Ansible YAML inventory at hosts.yml")])
    problems: list[Problem] = []
    locked: list[str] = []
    doc = _read_yaml(hosts_file, vault_password, problems, locked)
    hosts: dict[str, RawHost] = {}
    inline_group_vars: dict[str, tuple[dict[str, Any], str]] = {}
    depths: dict[str, int] = {}
    if not isinstance(doc, dict) or "all" not in doc:
        problems.append(Problem(str(hosts_file), "all", "top-level group `all` is missing",
                                "start the file with `all:` and put groups under `children:`"))
    else:
        _walk_groups("all", doc["all"], 0, [], hosts, inline_group_vars, depths,
                     str(hosts_file), problems)
    vault_files: set[str] = set()
    ordered_groups = sorted(depths, key=lambda g: (depths[g], g))
    group_files = {g: _vars_files(path / "group_vars", g) for g in ordered_groups}
    file_cache: dict[Path, dict[str, Any]] = {}

    def read_vars(f: Path) -> dict[str, Any]:
        if f not in file_cache:
            raw_text_head = f.read_text()[:len(VAULT_HEADER)]
            data = _read_yaml(f, vault_password, problems, locked)
            if raw_text_head == VAULT_HEADER or f.stem.startswith("vault"):
                vault_files.add(str(f))
            if not isinstance(data, dict):
                problems.append(Problem(str(f), "(file)", "must be a mapping of variables",
                                        "write `key: value` lines"))
                data = {}
            file_cache[f] = data
        return file_cache[f]

    for host in hosts.values():
        inline = {k.removeprefix("__inline__"): v for k, v in host.vars.items()}
        host.vars = {}
        for group in ordered_groups:
            if group != "all" and group not in host.groups:
                continue
            layers: list[tuple[dict[str, Any], str]] = []
            if group in inline_group_vars:
                layers.append(inline_group_vars[group])
            layers += [(read_vars(f), str(f)) for f in group_files[group]]
            for data, source in layers:
                for key, value in data.items():
                    host.vars[key] = value
                    host.sources[key] = source
        for key, value in inline.items():
            host.vars[key] = value
            host.sources[key] = str(hosts_file)
        for f in _vars_files(path / "host_vars", host.name):
            for key, value in read_vars(f).items():
                host.vars[key] = value
                host.sources[key] = str(f)
        host.groups.discard("all")
    if problems:
        raise InventoryError(problems)
    return RawInventory(root=path, hosts_file=hosts_file, hosts=hosts, group_depth=depths,
                        vault_files=vault_files, locked_vault_files=sorted(set(locked)))


_SIMPLE_REF = re.compile(r"^\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}$")
_ENV_REF = re.compile(
    r"""^\{\{\s*lookup\(\s*['"]env['"]\s*,\s*['"]([A-Za-z_][A-Za-z0-9_]*)['"]\s*\)\s*\}\}$""")


def is_reference(value: Any) -> bool:
    """True for the two indirections deploykit resolves itself: `{{ var }}` and env lookups."""
    return isinstance(value, str) and bool(_SIMPLE_REF.match(value) or _ENV_REF.match(value))


def resolve_reference(value: Any, variables: dict[str, Any], depth: int = 0) -> tuple[Any, bool]:
    """Follow `{{ name }}` / `{{ lookup('env', 'X') }}`; returns (value, resolved?)."""
    if not isinstance(value, str) or depth > 8:
        return value, True
    if m := _SIMPLE_REF.match(value):
        if m.group(1) not in variables:
            return None, False
        return resolve_reference(variables[m.group(1)], variables, depth + 1)
    if m := _ENV_REF.match(value):
        env = os.environ.get(m.group(1))
        return env, env is not None
    return value, True
