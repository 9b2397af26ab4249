"""Any inventory Ansible accepts, read through Ansible's own inventory API: INI files,
inventory scripts, plugin configs (AWX/AAP job inventories), directories of those.

Ansible resolves groups, group_vars/host_vars beside the source and vault (whole files and
inline `!vault` values); deploykit's typed model then validates the result as for its own
YAML inventories. Every value keeps the file Ansible read it from (ansible-core 2.19 tags
each value with its origin), so problems still name file and key.
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any

from deploy_kit.config.bounded import Exceeded, run_bounded
from deploy_kit.config.raw import VAULT_HEADER, RawHost, RawInventory, name_problem
from deploy_kit.config.vars_files import blocking_source, directory_sources, vars_file_problems
from deploy_kit.config.vault import VaultSecrets, fix_for
from deploy_kit.core.errors import InventoryError, Problem
from deploy_kit.safe_read import UnsafeText, check_structure, scalar_problem, source_problem

# What VariableManager adds beside the inventory's own variables
MAGIC = frozenset({
    "ansible_check_mode", "ansible_config_file", "ansible_dependent_role_names",
    "ansible_diff_mode", "ansible_facts", "ansible_forks", "ansible_inventory_sources",
    "ansible_play_batch", "ansible_play_hosts", "ansible_play_hosts_all",
    "ansible_play_role_names", "ansible_playbook_python", "ansible_role_names",
    "ansible_run_tags", "ansible_search_path", "ansible_skip_tags", "ansible_verbosity",
    "ansible_version", "group_names", "groups", "hostvars", "inventory_dir", "inventory_file",
    "inventory_hostname", "inventory_hostname_short", "omit", "play_hosts", "playbook_dir",
    "role_names"})


_SCRIPT_ORIGIN = re.compile(r"^<inventory script output from '(.+)'>$")


class _Locked(Exception):
    """An inline vault value and no password: its value is unknown."""


@cache
def _plugins_ready() -> None:
    from ansible.plugins.loader import init_plugin_loader
    from ansible.utils.collection_loader import AnsibleCollectionConfig

    if AnsibleCollectionConfig.collection_finder is None:  # else: inside ansible-playbook
        init_plugin_loader()


def load_with_ansible(sources: list[Path], vault: VaultSecrets) -> RawInventory:
    """Every source merged as ansible-playbook merges several -i (the first names the
    site: its directory is the root). Ansible reads them in a child process with a time
    and a memory limit (config/bounded.py): a script that never returns or an alias bomb
    in a group_vars file Ansible reads itself is one problem, not a hang or a crash."""
    source = sources[0]
    root = source if source.is_dir() else source.parent
    raw = RawInventory(root=root, hosts_file=source, hosts={}, group_depth={},
                       vault_files=set(), locked_vault_files=[], problems=[],
                       source=source)
    named = " ".join(f"-i {p}" for p in sources)
    unusable = [Problem(str(p), "--inventory", why, "pass a readable inventory file or "
                        "directory") for p in sources if (why := source_problem(p))]
    # files Ansible would block on or expand without bound are never handed to it
    unusable += [Problem(str(f), "(inventory source)", why, "fix it, or move it out of "
                         "the inventory directory")
                 for p in sources if not source_problem(p)
                 for f in (directory_sources(p) if p.is_dir() else [p])
                 if (why := blocking_source(f))]
    if unusable:
        raw.problems += unusable
        raw.hosts_file_broken = True
        return raw
    try:
        found = run_bounded(lambda: _read(sources, vault), named)
    except Exceeded as exc:
        raw.problems.append(Problem(str(source), "(inventory)", exc.why, exc.fix))
        raw.hosts_file_broken = True
        return raw
    raw.problems += [Problem(p[0], p[1], p[2], p[3], tuple(p[4])) for p in found["problems"]]
    raw.hosts_file_broken = found["broken"]
    raw.hosts = {name: RawHost(name=name, groups=set(h["groups"]),
                               vars=_mark_unsafe(h["vars"], h.get("unsafe", {})),
                               sources=h["sources"]) for name, h in found["hosts"].items()}
    raw.group_depth = found["group_depth"]
    raw.locked_vault_files = found["locked"]
    raw.vaulted_keys = {(o, k) for o, k in found["vaulted"]}
    # a whole-file vault is decrypted by Ansible: its values count as vaulted
    raw.vault_files = {origin for h in raw.hosts.values() for origin in h.sources.values()
                       if _encrypted_file(origin)}
    return raw


def ansible_adds(sources: list[Path]) -> bool:
    """Whether Ansible finds any host, group or group variable in these sources, parsed as
    it parses them (in the bounded child; Exceeded when it cannot finish). A file it
    fails to parse adds nothing: ansible-playbook warns and goes on without it."""
    return bool(run_bounded(lambda: _adds(sources), " ".join(f"-i {p}" for p in sources)))


def _adds(sources: list[Path]) -> bool:
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader

    _plugins_ready()
    inventory = InventoryManager(loader=DataLoader(), sources=[str(s) for s in sources])
    return bool(inventory.hosts) or any(
        str(name) not in ("all", "ungrouped") or group.vars
        for name, group in inventory.groups.items())


def _no_host_problem(inventory: Any, sources: list[Path], named: str) -> Problem:
    """No host at all: name the sources Ansible could not parse (a script printing no
    JSON, an INI line it cannot read), never its error text, which may quote a value."""
    parsed = {str(p) for p in getattr(getattr(inventory, "_inventory", None),
                                      "processed_sources", [])}
    unparsed = [f for p in sources for f in (directory_sources(p) if p.is_dir() else [p])
                if str(f) not in parsed]
    fix = f"check it with `ansible-inventory {named} --graph -vvv`"
    if len(unparsed) == 1:
        return Problem(str(unparsed[0]), "(inventory source)", "Ansible could not parse it "
                       "with any inventory plugin, and found no host", fix)
    names = ", ".join(f.name for f in unparsed[:5])
    why = f" (it could not parse {names})" if unparsed else ""
    return Problem(str(sources[0]), "(inventory)", f"Ansible found no host in it{why}", fix)


def _read(sources: list[Path], vault: VaultSecrets) -> dict[str, Any]:
    """Ansible's view of the sources as plain JSON (runs in the bounded child)."""
    from ansible.errors import AnsibleError
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader
    from ansible.vars.manager import VariableManager

    _plugins_ready()
    source = sources[0]
    named = " ".join(f"-i {p}" for p in sources)
    loader = DataLoader()
    loader.set_vault_secrets(list(vault.pairs))
    problems: list[Problem] = []
    out: dict[str, Any] = {"hosts": {}, "group_depth": {}, "locked": [], "vaulted": [],
                           "broken": False}

    def done(broken: bool = False) -> dict[str, Any]:
        out["broken"] = broken
        out["problems"] = [[p.file, p.key, p.message, p.fix, list(p.hosts)] for p in problems]
        return out

    try:
        inventory = InventoryManager(loader=loader, sources=[str(s) for s in sources])
        found = inventory.get_hosts()
        if not found:
            problems.append(_no_host_problem(inventory, sources, named))
            return done(broken=True)
        # the group_vars/host_vars files Ansible is about to read, read first as deploykit
        # reads its own (regular files, size, links, aliases, numbers): a bad one is named
        # (beside every file Ansible parsed: a directory's subdirectories have their own)
        parsed = [Path(str(p)) for p in getattr(getattr(inventory, "_inventory", None),
                                                "processed_sources", [])]
        problems += vars_file_problems([*sources, *parsed],
                                       [str(g.name) for g in inventory.groups.values()],
                                       [str(h.name) for h in found])
        if problems:
            return done(broken=True)
        variables = VariableManager(loader=loader, inventory=inventory)
        for host in found:
            # str(): ansible-core 2.19 tags names with their origin (YAML cannot dump those)
            name = str(host.name)
            problem = name_problem(name)
            if problem:
                problems.append(Problem(str(source), name, problem, "rename the host"))
                continue
            entry: dict[str, Any] = {
                "groups": sorted({str(g.name) for g in host.get_groups()} - {"all", "ungrouped"}),
                "vars": {}, "sources": {}, "unsafe": {}}
            for tagged, value in variables.get_vars(host=host, include_hostvars=False).items():
                key = str(tagged)
                if key in MAGIC:
                    continue
                origin = _origin(value) or str(source)
                why = check_structure(value) or scalar_problem(value)
                if why:  # before any copy: an alias bomb is counted, never expanded
                    problems.append(Problem(origin, key, f"cannot use: it {why}",
                                            "write the value out plainly", hosts=(name,)))
                    continue
                try:
                    entry["vars"][key], vaulted = _plain(value, vault, origin, key)
                except InventoryError as exc:
                    problems += exc.problems
                    continue
                except _Locked:
                    out["locked"].append(f"{origin}: {key}")
                    continue
                entry["sources"][key] = origin
                if marks := list(_unsafe_paths(entry["vars"][key], [])):
                    entry["unsafe"][key] = marks  # UnsafeText does not survive the JSON
                if vaulted:
                    out["vaulted"].append([origin, key])
            out["hosts"][name] = entry
        out["group_depth"] = {str(g.name): g.depth for g in inventory.groups.values()}
    except AnsibleError as exc:
        problems.append(_ansible_problem(exc, sources, vault))
        return done(broken=True)
    except (ValueError, TypeError, OSError) as exc:  # a plugin's own error, not Ansible's
        problems.append(Problem(str(source), "(inventory)",
                                f"Ansible could not read it: {str(exc).splitlines()[0][:200]}",
                                f"check it with `ansible-inventory {named} --list`"))
        return done(broken=True)
    return done()


def _ansible_problem(exc: BaseException, sources: list[Path], vault: VaultSecrets) -> Problem:
    """One line for what Ansible refused; a vault file it could not open is named with the
    ids given and the id it wants."""
    source = sources[0]
    message = (str(getattr(exc, "message", exc)).splitlines() or [type(exc).__name__])[0]
    if "vault" not in message.lower():
        return Problem(str(source), "(inventory)", f"Ansible: {message}",
                       f"check it with `ansible-inventory -i {source} --list`")
    ciphertext = _ciphertext_in(exc)
    if ciphertext is None:
        return Problem(str(source), "(file)", f"Ansible: {message}", fix_for(None))
    return vault.cannot_decrypt(ciphertext, _vault_file_of(ciphertext, sources) or str(source))


def _ciphertext_in(exc: BaseException | None) -> str | None:
    """The vault text Ansible failed on (its AnsibleVaultError carries it as `obj`)."""
    while exc is not None:
        obj = getattr(exc, "obj", None)
        if isinstance(obj, bytes | str):
            text = obj.decode(errors="replace") if isinstance(obj, bytes) else obj
            if text.startswith(VAULT_HEADER):
                return text
        exc = exc.__cause__ or exc.__context__
    return None


def _vault_file_of(ciphertext: str, sources: list[Path]) -> str | None:
    """Which group_vars/host_vars file beside a source holds this vault text."""
    for source in sources:
        root = source if source.is_dir() else source.parent
        for folder in ("group_vars", "host_vars"):
            for path in sorted((root / folder).rglob("*")) if (root / folder).is_dir() else []:
                if path.is_file() and _encrypted_file(str(path)):
                    try:
                        if path.read_text().strip() == ciphertext.strip():
                            return str(path)
                    except (OSError, UnicodeDecodeError):
                        continue
    return None


def _origin(value: Any) -> str | None:
    """The file Ansible read a value from (ansible-core 2.19's Origin tag), if known."""
    try:
        from ansible.module_utils._internal._datatag import AnsibleTagHelper
    except ImportError:  # older ansible-core: no origin tags
        return None
    for tag in AnsibleTagHelper.tags(value):
        path = getattr(tag, "path", None)
        if path:
            return str(path)
        # a script's output: Origin(description="<inventory script output from '/x'>")
        found = _SCRIPT_ORIGIN.match(str(getattr(tag, "description", "") or ""))
        if found:
            return found.group(1)
    return None


def _plain(value: Any, vault: VaultSecrets, origin: str, key: str) -> tuple[Any, bool]:
    """(value as plain JSON types, whether an inline vault value was decrypted in it)."""
    vaulted = False

    def decrypt(obj: Any) -> Any:
        nonlocal vaulted
        ciphertext = getattr(obj, "_ciphertext", None)
        if ciphertext is None:
            return str(obj)  # a date, a tagged scalar JSON does not know
        if not vault:
            raise _Locked
        vaulted = True
        text = ciphertext.decode() if isinstance(ciphertext, bytes) else str(ciphertext)
        return vault.decrypt(text, origin, key)

    return _keep_unsafe(value, json.loads(json.dumps(value, default=decrypt))), vaulted


def _keep_unsafe(original: Any, plain: Any) -> Any:
    """`plain` with each string Ansible will never template (`!unsafe`: ansible-core 2.19
    tags every other inventory string TrustedAsTemplate) marked UnsafeText, as deploykit's
    own YAML reader marks it (config/templated.py then takes it as a literal)."""
    if isinstance(original, str) and isinstance(plain, str):
        return UnsafeText(plain) if _untrusted(original) else plain
    if isinstance(original, dict) and isinstance(plain, dict):
        by_name = {str(k): v for k, v in original.items()}
        return {k: _keep_unsafe(by_name.get(k), v) for k, v in plain.items()}
    if isinstance(original, list | tuple) and isinstance(plain, list):
        return [_keep_unsafe(o, p) for o, p in zip(original, plain, strict=False)]
    return plain


def _unsafe_paths(value: Any, path: list[Any]) -> Any:
    """Where in `value` an UnsafeText is (lists of keys and indexes), to cross the child's
    JSON (bounded.run_bounded) and be marked again by _mark_unsafe."""
    if isinstance(value, UnsafeText):
        yield path
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _unsafe_paths(v, [*path, k])
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _unsafe_paths(v, [*path, i])


def _mark_unsafe(variables: dict[str, Any], marks: dict[str, list[list[Any]]]
                 ) -> dict[str, Any]:
    for key, paths in marks.items():
        for path in paths:
            if not path:
                variables[key] = UnsafeText(variables[key])
                continue
            node = variables[key]
            for step in path[:-1]:
                node = node[step]
            node[path[-1]] = UnsafeText(node[path[-1]])
    return variables


def _untrusted(text: str) -> bool:
    try:
        from ansible._internal._datatag._tags import TrustedAsTemplate
        from ansible.module_utils._internal._datatag import AnsibleTagHelper
    except ImportError:  # older ansible-core: no trust tags, every string is templated
        return False
    tags = AnsibleTagHelper.tags(text)
    return bool(tags) and not any(isinstance(t, TrustedAsTemplate) for t in tags)


@cache
def _encrypted_file(path: str) -> bool:
    try:
        with open(path, "rb") as handle:
            return handle.read(len(VAULT_HEADER)) == VAULT_HEADER.encode()
    except OSError:
        return False
