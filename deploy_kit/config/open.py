"""One call from an --inventory argument to a validated Site (no host is contacted)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from deploy_kit.config.load import load_inventory, resolve_inventory_path
from deploy_kit.config.rules import validate_site
from deploy_kit.config.site import Site, build_site
from deploy_kit.errors import InventoryError, Problem
from deploy_kit.project import project_dir


def read_vault_password(path: Path | None) -> str | None:
    if path is None:
        return None
    try:
        return path.read_text().strip()
    except OSError as exc:
        raise InventoryError([Problem(str(path), "--vault-password-file", str(exc.strerror),
                                      "pass a readable file")]) from None


def open_site(inventory: str, vault_password_file: Path | None = None) -> Site:
    path = resolve_inventory_path(inventory, project_dir())
    raw = load_inventory(path, read_vault_password(vault_password_file), collect=True)
    problems = list(raw.problems)
    if not raw.hosts_file_broken:  # without the host list, every rule would be a guess
        site, more = build_site(raw)
        problems += more + validate_site(site)
    if problems:
        raise InventoryError(problems)
    if vault_password_file is not None:
        site = dataclasses.replace(site, vault_password_file=vault_password_file.resolve())
    return site
