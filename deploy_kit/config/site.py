"""The typed site: hosts with their groups and validated variables, built from a raw inventory."""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from deploy_kit import compat
from deploy_kit.config.load import RawInventory, is_reference, resolve_reference
from deploy_kit.config.models import OWNED_PREFIXES, SECRET_KEYS, HostConfig, known_keys
from deploy_kit.errors import Problem
from deploy_kit.geometry import ModelGeometry, find_preset, from_hf_config

GROUPS = ("ceph_admin", "rgw", "consul_servers", "dns", "vllm")
CONNECTION_KEYS = ("ansible_user", "ansible_port", "ansible_ssh_private_key_file",
                   "ansible_connection")


@dataclass(frozen=True)
class Host:
    name: str
    address: str
    groups: frozenset[str]
    config: HostConfig
    sources: dict[str, str]
    geometry: ModelGeometry | None
    connection: dict[str, str] = field(default_factory=dict)  # ansible_user, _port, key, ...

    def source(self, key: str, fallback: str) -> str:
        return self.sources.get(key, fallback)

    @property
    def block_size(self) -> int:
        """The pinned --block-size: explicit, else the vLLM version's default per accelerator."""
        if self.config.vllm_block_size is not None:
            return self.config.vllm_block_size
        table = compat.vllm(self.config.vllm_version).default_block_size
        return table[self.config.vllm_accelerator or "cuda"]

    @property
    def workers(self) -> int:
        return self.config.vllm_tensor_parallel_size * self.config.vllm_pipeline_parallel_size


@dataclass(frozen=True)
class Site:
    name: str
    root: Path
    hosts_file: str
    hosts: dict[str, Host]
    secrets_locked: bool  # vault encrypted and no password given: secret values unknown

    def group(self, name: str) -> list[Host]:
        return [h for h in self.hosts.values() if name in h.groups]

    @cached_property
    def settings(self) -> HostConfig:
        """Site-wide values: taken from the first host (rules check the others agree)."""
        first = self.group("rgw") or list(self.hosts.values())
        return first[0].config if first else HostConfig()

    def settings_source(self, key: str) -> str:
        first = self.group("rgw") or list(self.hosts.values())
        return first[0].source(key, self.hosts_file) if first else self.hosts_file

    def limit(self, names: set[str]) -> Site:
        return Site(self.name, self.root, self.hosts_file,
                    {n: h for n, h in self.hosts.items() if n in names}, self.secrets_locked)


def _fix_for(error: dict[str, Any]) -> str:
    kind = error.get("type", "")
    ctx = error.get("ctx") or {}
    if kind == "literal_error":
        return f"use one of {ctx.get('expected', 'the allowed values')}"
    if kind.endswith("_type") or kind.endswith("_parsing"):
        return f"give a value of type {kind.split('_')[0]}"
    if kind in ("greater_than_equal", "greater_than", "less_than_equal", "less_than"):
        return "give a value in range"
    if kind == "string_pattern_mismatch":
        return f"match {ctx.get('pattern')}"
    if kind == "extra_forbidden":
        return "remove it (see README for the supported keys)"
    if kind == "missing":
        return "add it"
    return "see README for the accepted values"


def _geometry(raw_vars: dict[str, Any], config: HostConfig, root: Path, source: str,
              problems: list[Problem]) -> ModelGeometry | None:
    if config.vllm_model_config:
        path = Path(config.vllm_model_config)
        path = path if path.is_absolute() else root / path
        try:
            return from_hf_config(path)
        except (OSError, KeyError, ValueError) as exc:
            problems.append(Problem(source, "vllm_model_config", f"cannot read {path}: {exc}",
                                    "point it at the model's config.json"))
            return None
    geometry = find_preset(config.vllm_model)
    if geometry is None:
        problems.append(Problem(source, "vllm_model",
                                f"no built-in KV geometry for {config.vllm_model!r}",
                                "set vllm_model_config to the model's config.json"))
    return geometry


def build_site(raw: RawInventory) -> tuple[Site, list[Problem]]:
    """Validate every host in one pass; hosts with problems are left out of the Site."""
    problems: list[Problem] = []
    owned = known_keys()
    hosts: dict[str, Host] = {}
    hosts_file = str(raw.hosts_file)
    for name, rh in sorted(raw.hosts.items()):
        values: dict[str, Any] = {}
        for key, value in rh.vars.items():
            src = rh.sources.get(key, hosts_file)
            if key.startswith(OWNED_PREFIXES) and key not in owned:
                close = difflib.get_close_matches(key, owned, n=1)
                problems.append(Problem(src, key, "unknown key",
                                        f"did you mean {close[0]}?" if close else
                                        "remove it (see README for the supported keys)"))
                continue
            if key not in owned:
                continue
            if key in SECRET_KEYS:
                if src not in raw.vault_files and not is_reference(value):
                    problems.append(Problem(src, key, "secret written inline",
                                            "move it to group_vars/all/vault.yml "
                                            "(ansible-vault) and reference it as "
                                            "'{{ vault_" + key + " }}'"))
                    continue
                value, ok = resolve_reference(value, rh.vars)
                if not ok:
                    continue  # locked vault or unset env: unknown until Ansible runs
            values[key] = value
        address = str(rh.vars.get("deploykit_address") or rh.vars.get("ansible_host") or name)
        try:
            config = HostConfig.model_validate(values)
        except ValidationError as exc:
            for err in exc.errors():
                key = str(err["loc"][0]) if err["loc"] else "(host)"
                detail = ".".join(str(p) for p in err["loc"][1:])
                problems.append(Problem(rh.sources.get(key, hosts_file),
                                        f"{key}{'.' + detail if detail else ''}",
                                        f"{err['msg']} (host {name})", _fix_for(dict(err))))
            continue
        geometry = None
        if "vllm" in rh.groups:
            geometry = _geometry(rh.vars, config, raw.root,
                                 rh.sources.get("vllm_model", hosts_file), problems)
        connection = {k: str(v) for k, v in rh.vars.items() if k in CONNECTION_KEYS}
        hosts[name] = Host(name=name, address=address, groups=frozenset(rh.groups),
                           config=config, sources=dict(rh.sources), geometry=geometry,
                           connection=connection)
    site = Site(name=raw.root.name, root=raw.root, hosts_file=hosts_file, hosts=hosts,
                secrets_locked=bool(raw.locked_vault_files))
    return site, problems
