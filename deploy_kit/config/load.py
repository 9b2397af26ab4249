"""Read an Ansible inventory directory into per-host variables, remembering each key's file.

Precedence follows Ansible: group `all`, then child groups (shallow before deep, then by
name), then the host; within one level, vars inline in hosts.yml lose to group_vars files.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import yaml

from deploy_kit.config.ansible_inventory import ansible_adds, load_with_ansible
from deploy_kit.config.bounded import Exceeded
from deploy_kit.config.raw import VAULT_HEADER, RawHost, RawInventory, name_problem
from deploy_kit.config.vars_files import (
    ansible_vars_files,
    blocking_source,
    directory_sources,
    every_vars_file,
    link_outside,
)
from deploy_kit.config.vault import VaultSecrets
from deploy_kit.core.errors import InventoryError, Problem
from deploy_kit.safe_read import (
    UnreadableFile,
    UnusableValues,
    VaultText,
    load_yaml,
    read_text,
    source_problem,
)

INVENTORY_FILES = ("hosts.yml", "hosts.yaml")


def resolve_inventory_path(name_or_path: str, project_dir: Path,
                           local: Path | None = None) -> Path:
    """`prod` -> <local>/prod, else <project>/inventory/prod (an installed wheel: the site's
    ./inventory/prod, else a bundled one such as `example`); an existing path is used as it is."""
    candidate = Path(name_or_path)
    if candidate.exists():
        return candidate.resolve()
    for named in ([local / name_or_path] if local else []) + \
            [project_dir / "inventory" / name_or_path]:
        if named.exists():
            return named.resolve()
    # a name is looked up under inventory/; a path (with a `/`) is taken as it is
    where = candidate if "/" in name_or_path else Path("inventory") / name_or_path
    raise InventoryError([Problem(str(candidate), "--inventory", "no such inventory",
                                  f"create {where}/hosts.yml or pass a path")])


def _read_yaml(path: Path, vault: VaultSecrets, problems: list[Problem],
               locked: list[str], encrypted: set[str] | None = None,
               vaulted: set[tuple[str, str]] | None = None, root: Path | None = None) -> Any:
    if root is not None and (target := link_outside(path, root)) is not None:
        # read nothing a link points at outside the inventory (/etc/shadow, a key): its
        # text could end up in a message, a rendered file or a run record
        problems.append(Problem(str(path), "(file)", f"is a link to {target}, outside the "
                                "inventory and its repository",
                                "copy the file into the inventory"))
        return {}
    try:
        text = read_text(path)
    except UnreadableFile as exc:
        problems.append(Problem(str(path), "(file)", f"cannot read: {exc}",
                                "make it a regular UTF-8 YAML file"))
        return {}
    if text.startswith(VAULT_HEADER):
        if encrypted is not None:
            encrypted.add(str(path))
        if not vault:
            locked.append(str(path))
            return {}
        text = _decrypt(text, vault, path, problems)
    try:
        data, duplicates = load_yaml(text)
    except UnusableValues as exc:
        for key, why in exc.values:
            problems.append(Problem(str(path), key, why, "write the value as a plain number "
                                    "or quote it as text"))
        return {}
    except UnreadableFile as exc:
        problems.append(Problem(str(path), "(file)", f"cannot use: it {exc}",
                                "flatten the structure / remove the recursive alias"))
        return {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark else "YAML"
        detail = getattr(exc, "problem", None) or exc.__class__.__name__
        problems.append(Problem(str(path), where, f"not valid YAML ({detail})",
                                "fix the syntax (other files were still checked)"))
        return {}
    for key, line in duplicates:
        problems.append(Problem(str(path), key, f"defined twice in one mapping (line {line}; "
                                "YAML keeps the last one silently)",
                                "keep one definition"))
    if isinstance(data, dict):
        data = _open_inline_vault(data, path, vault, problems, locked, vaulted)
    return data if data is not None else {}


def _open_inline_vault(data: dict[str, Any], path: Path, vault: VaultSecrets,
                       problems: list[Problem], locked: list[str],
                       vaulted: set[tuple[str, str]] | None) -> dict[str, Any]:
    """`key: !vault |` values, at any depth (hosts.yml holds host and group vars):
    decrypted and remembered as vaulted; without a password the key is left out, like a
    locked vault file (its value is unknown)."""
    opened: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict):
            opened[key] = _open_inline_vault(value, path, vault, problems, locked, vaulted)
        elif not isinstance(value, VaultText):
            opened[key] = value
        elif not vault:
            locked.append(f"{path}: {key}")
        else:
            opened[key] = _decrypt(str(value), vault, path, problems, key=str(key))
            if vaulted is not None:
                vaulted.add((str(path), str(key)))
    return opened


def _decrypt(text: str, vault: VaultSecrets, path: Path, problems: list[Problem],
             key: str = "(file)") -> str:
    """Ansible's VaultLib over every secret given (a 1.2 file is matched by its id)."""
    try:
        return vault.decrypt(text, str(path), key)
    except InventoryError as exc:
        problems += exc.problems
        return ""


def _walk_groups(name: str, node: Any, depth: int, parents: list[str],
                 hosts: dict[str, RawHost], group_vars: dict[str, tuple[dict[str, Any], str]],
                 depths: dict[str, int], hosts_file: str, problems: list[Problem],
                 broken: set[str] | None = None) -> None:
    """Walk one group; groups whose host list could not be read are added to `broken` (so
    no rule claims they have no hosts)."""
    broken = set() if broken is None else broken
    before = len(problems)
    _walk_group(name, node, depth, parents, hosts, group_vars, depths, hosts_file,
                problems, broken)
    for problem in problems[before:]:
        broken.add(_owning_group(problem.key))


def _owning_group(key: str) -> str:
    """`all.children.rgw.hosts.x` -> rgw: the group whose own entry holds the problem."""
    parts = key.split(".")
    owner, i = parts[0], 1
    while i < len(parts) - 1 and parts[i] == "children":
        owner, i = parts[i + 1], i + 2
    return owner


def _walk_group(name: str, node: Any, depth: int, parents: list[str],
                hosts: dict[str, RawHost], group_vars: dict[str, tuple[dict[str, Any], str]],
                depths: dict[str, int], hosts_file: str, problems: list[Problem],
                broken: set[str]) -> None:
    where = ".".join(["all", *(f"children.{g}" for g in [*parents, name][1:])])
    if node is None:
        node = {}
    if not isinstance(node, dict):
        problems.append(Problem(hosts_file, where,
                                f"group {name} must be a mapping, not a {type(node).__name__}",
                                "use hosts:/children:/vars: keys"))
        return
    if name in parents:
        problems.append(Problem(hosts_file, where, f"group {name} contains itself",
                                "remove the recursive children: entry"))
        return
    depths[name] = max(depth, depths.get(name, 0))
    for key in sorted(set(node) - {"hosts", "children", "vars"}, key=str):
        problems.append(Problem(hosts_file, f"{where}.{key}", "not a group key (Ansible "
                                "would treat the group as a host list)",
                                "use hosts:, children: or vars:"))
    group_vars_node = node.get("vars")
    if group_vars_node is not None and not isinstance(group_vars_node, dict):
        problems.append(Problem(hosts_file, f"{where}.vars",
                                f"must be a mapping of variables, not a "
                                f"{type(group_vars_node).__name__}",
                                "write `key: value` lines under vars:"))
    elif group_vars_node:
        group_vars[name] = (dict(group_vars_node), hosts_file)
    host_nodes = node.get("hosts")
    if host_nodes is not None and not isinstance(host_nodes, dict):
        problems.append(Problem(hosts_file, f"{where}.hosts",
                                f"must be a mapping of host names, not a "
                                f"{type(host_nodes).__name__}",
                                "write each host as `name:` (or `name: {ansible_host: IP}`)"))
        host_nodes = None
    for host_name, host_vars in (host_nodes or {}).items():
        host_key = f"{where}.hosts.{host_name}"
        why = name_problem(str(host_name)) if isinstance(host_name, str) else \
            f"{host_name!r} is not a host name"
        if why:
            problems.append(Problem(hosts_file, host_key, why,
                                    "rename the host (set ansible_host for its address)"))
            continue
        if host_vars is not None and not isinstance(host_vars, dict):
            problems.append(Problem(hosts_file, host_key,
                                    f"host entry must be a mapping of variables or empty, "
                                    f"not a {type(host_vars).__name__}",
                                    f"write `{host_name}: {{ansible_host: IP}}`"))
            continue
        host = hosts.setdefault(str(host_name), RawHost(str(host_name)))
        host.groups.update([*parents, name])
        for key, value in (host_vars or {}).items():
            host.vars[f"__inline__{key}"] = value
    children = node.get("children")
    if children is not None and not isinstance(children, dict):
        problems.append(Problem(hosts_file, f"{where}.children",
                                f"must be a mapping of group names, not a "
                                f"{type(children).__name__}",
                                "write each child group as `name:` with its own hosts:"))
        children = None
    for child, child_node in (children or {}).items():
        why = name_problem(str(child))
        if why:
            problems.append(Problem(hosts_file, f"{where}.children.{child}",
                                    why.replace("inventory name", "group name"),
                                    "rename the group"))
            continue
        _walk_groups(str(child), child_node, depth + 1, [*parents, name], hosts, group_vars,
                     depths, hosts_file, problems, broken)


def yaml_hosts_file(path: Path) -> Path | None:
    """The static YAML inventory deploykit reads itself (precise `file: key` messages):
    a directory's hosts.yml, or a `*.yml` file whose top level is `all:` (kubespray's
    `-i inventory/prod/hosts.yml`). None: another kind Ansible reads (INI, script, plugin)."""
    if path.is_dir():
        # Ansible parses every source in a directory and merges them: only a directory
        # whose one source is hosts.yml is read here, any other through Ansible
        sources = directory_sources(path)
        if len(sources) != 1 or sources[0].name not in INVENTORY_FILES:
            return None
        path = sources[0]
        if not path.is_file():
            return path  # a FIFO, a device: deploykit's loader names it
    elif path.suffix not in (".yml", ".yaml") or not path.is_file():
        return None
    try:
        head = read_text(path)
    except UnreadableFile:
        return path  # deploykit's loader reports it, naming the file
    # an inventory plugin's config (`plugin: …`) is Ansible's to read
    first_keys = {line.split(":", 1)[0].strip() for line in head.splitlines()
                  if line and not line[0].isspace() and not line.startswith(("#", "-"))}
    return None if "plugin" in first_keys else path


def _beside_hosts_file(directory: Path) -> tuple[Path | None, list[Problem]]:
    """A directory with more than one inventory source (Ansible merges every file in it):
    (its hosts.yml, when the other sources add nothing Ansible would apply, else None:
    the whole directory is read through Ansible, as ansible-playbook reads it; problems of
    sources Ansible cannot read safely, which are never handed to it)."""
    sources = directory_sources(directory)
    if not sources:
        raise InventoryError([Problem(str(directory), "hosts.yml", "missing (Ansible finds "
                                      "no inventory source in this directory)",
                                      "write an Ansible YAML inventory at hosts.yml")])
    primary = next((directory / f for f in INVENTORY_FILES if directory / f in sources), None)
    others = [s for s in sources if s != primary]
    fix = "move it out of the inventory directory (Ansible reads every file there as an " \
        "inventory source)"
    # what would block Ansible or fill its memory is named and never handed to it (a
    # file it cannot open or parse it only warns about, as ansible-playbook does)
    problems = [Problem(str(other), "(inventory source)", why, fix)
                for other in others if (why := blocking_source(other))]
    if problems and primary is None:
        raise InventoryError(problems)
    if problems or primary is None:
        return primary, problems
    try:
        adds = ansible_adds(others)
    except Exceeded as exc:
        return primary, [Problem(str(directory), "(inventory)", exc.why, exc.fix)]
    return (None, []) if adds else (primary, [])


def load_inventory(path: Path, vault: VaultSecrets | None = None, *,
                   collect: bool = False) -> RawInventory:
    """Read the inventory; with collect=True problems are returned in RawInventory.problems
    (so the caller can add the problems of the files that did load) instead of raised.
    A static YAML inventory is read here; any other source Ansible accepts (INI, an
    inventory script, a plugin config, a directory of those) through Ansible's own API."""
    vault = vault or VaultSecrets()
    if why := source_problem(path):
        raise InventoryError([Problem(str(path), "--inventory", why,
                                      "pass a readable inventory file or directory")])
    hosts_file = yaml_hosts_file(path)
    problems: list[Problem] = []
    if hosts_file is None and path.is_dir():
        hosts_file, problems = _beside_hosts_file(path)
    if hosts_file is None:
        raw = load_with_ansible([path], vault)
        if raw.problems and not collect:
            raise InventoryError(raw.problems)
        return raw
    inventory_source = path
    path = hosts_file.parent  # group_vars/ and host_vars/ beside the hosts file, as Ansible
    locked: list[str] = []
    encrypted: set[str] = set()
    vaulted: set[tuple[str, str]] = set()
    before = len(problems)
    doc = _read_yaml(hosts_file, vault, problems, locked, encrypted, vaulted,
                     root=path)
    hosts_file_broken = len(problems) > before
    hosts: dict[str, RawHost] = {}
    inline_group_vars: dict[str, tuple[dict[str, Any], str]] = {}
    depths: dict[str, int] = {}
    broken_groups: set[str] = set()
    if not isinstance(doc, dict) or "all" not in doc:
        if not hosts_file_broken:
            problems.append(Problem(str(hosts_file), "all", "top-level group `all` is missing",
                                    "start the file with `all:` and put groups under "
                                    "`children:`"))
        hosts_file_broken = True
    else:
        _walk_groups("all", doc["all"], 0, [], hosts, inline_group_vars, depths,
                     str(hosts_file), problems, broken_groups)
    plain_vault_files: set[str] = set()
    ordered_groups = sorted(depths, key=lambda g: (depths[g], g))
    # Ansible's own discovery (vars_files.py): the files it reads, none it skips
    group_vars_dir, host_vars_dir = (Path(os.path.realpath(path / d))
                                     for d in ("group_vars", "host_vars"))
    group_files = {g: ansible_vars_files(group_vars_dir, g) for g in ordered_groups}
    file_cache: dict[Path, dict[str, Any]] = {}

    def read_vars(f: Path) -> dict[str, Any]:
        if f not in file_cache:
            data = _read_yaml(f, vault, problems, locked, encrypted, vaulted,
                              root=path)
            if str(f) not in encrypted and f.stem.startswith("vault"):
                plain_vault_files.add(str(f))
            if not isinstance(data, dict):
                problems.append(Problem(str(f), "(file)", "must be a mapping of variables",
                                        "write `key: value` lines"))
                data = {}
            file_cache[f] = data
        return file_cache[f]

    for host in hosts.values():
        inline = {k.removeprefix("__inline__"): v for k, v in host.vars.items()}
        host.vars = {}
        # Ansible's order (VARIABLE_PRECEDENCE): every group's vars written in the hosts file
        # (all, then by depth) rank below every group_vars/ file (all, then by depth), so a
        # child group's inline value loses to a parent's group_vars file
        mine = [g for g in ordered_groups if g == "all" or g in host.groups]
        if host.groups <= {"all"} and "ungrouped" not in group_files:
            # a host in no group is in Ansible's implicit `ungrouped` (a child of all)
            group_files["ungrouped"] = ansible_vars_files(group_vars_dir, "ungrouped")
        if host.groups <= {"all"}:
            mine.append("ungrouped")
        layers: list[tuple[dict[str, Any], str]] = [
            inline_group_vars[g] for g in mine if g in inline_group_vars]
        layers += [(read_vars(f), str(f)) for g in mine for f in group_files[g]]
        for data, source in layers:
            for key, value in data.items():
                host.vars[key] = value
                host.sources[key] = source
        for key, value in inline.items():
            host.vars[key] = value
            host.sources[key] = str(hosts_file)
        for f in ansible_vars_files(host_vars_dir, host.name):
            for key, value in read_vars(f).items():
                host.vars[key] = value
                host.sources[key] = str(f)
        host.groups.discard("all")
    if hosts_file_broken:  # still report syntax errors in every other file
        for f in every_vars_file(path):
            read_vars(f)
    if problems and not collect:
        raise InventoryError(problems)
    return RawInventory(root=path, hosts_file=hosts_file, hosts=hosts, group_depth=depths,
                        vault_files=set(encrypted), locked_vault_files=sorted(set(locked)),
                        plain_vault_files=plain_vault_files, problems=problems,
                        hosts_file_broken=hosts_file_broken, broken_groups=broken_groups,
                        vaulted_keys=vaulted, source=inventory_source)

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
