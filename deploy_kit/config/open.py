"""From --inventory arguments to a Site checked by the rules it is given (no host is
contacted). Commands open a site through ops/site.py, which gives every rule."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

from deploy_kit.config.ansible_inventory import load_with_ansible
from deploy_kit.config.fit import with_server_l1
from deploy_kit.config.identity import read_identity
from deploy_kit.config.load import load_inventory, resolve_inventory_path
from deploy_kit.config.raw import RawInventory
from deploy_kit.config.redact import redact, secret_values
from deploy_kit.config.rulebook import Rule
from deploy_kit.config.rules import validate_site
from deploy_kit.config.rules_inventory import unencodable, validate_raw
from deploy_kit.config.site import Site, build_site
from deploy_kit.config.vault import VaultSecrets, from_password_file
from deploy_kit.core.errors import InventoryError
from deploy_kit.project import inventories_dir, project_dir


def load_site(inventory: str | Sequence[str], vault: VaultSecrets | Path | None = None, *,
              rules: Sequence[Rule]) -> Site:
    """The site of one inventory (name or path), or of several sources merged as
    ansible-playbook merges several -i, checked by `rules` (the raw inventory's own rules
    always). `vault`: the run's secrets (a Path: one --vault-password-file)."""
    secrets = vault if isinstance(vault, VaultSecrets) else from_password_file(vault)
    names = [inventory] if isinstance(inventory, str) else [str(i) for i in inventory]
    # a source named twice is read once, as Ansible reads it
    paths = list(dict.fromkeys(resolve_inventory_path(name, project_dir(), inventories_dir())
                               for name in names))
    raw: RawInventory = load_inventory(paths[0], secrets, collect=True) if len(paths) == 1 \
        else load_with_ansible(paths, secrets)
    problems = list(raw.problems)
    if text_problems := unencodable(raw):  # nothing past the reader may fail to encode it
        raise InventoryError(redact(problems + text_problems, secret_values(raw)))
    name, wrong = read_identity(raw.root)
    problems += [wrong] if wrong else []
    if not raw.hosts_file_broken:  # without the host list, every rule would be a guess
        site, more = build_site(raw)
        if name is not None:  # the committed name wins over the directory's
            site = dataclasses.replace(site, name=name)
        site = with_server_l1(site)  # the LMCache server's computed L1 (config/fit.py)
        problems += more + validate_site(site, rules) + validate_raw(raw)
    if problems:
        raise InventoryError(redact(problems, secret_values(raw)))
    return dataclasses.replace(site, vault=secrets, sources=tuple(paths))
