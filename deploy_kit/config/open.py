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
    """The password, read as Ansible reads --vault-password-file: an executable file is a
    password script (its stdout), anything else a regular file (bounded, no FIFO)."""
    if path is None:
        return None
    import os
    import subprocess

    from deploy_kit.safe_read import UnreadableFile, read_text

    def refuse(why: str) -> InventoryError:
        return InventoryError([Problem(str(path), "--vault-password-file", why,
                                       "pass a readable file or a password script")])

    if path.is_file() and os.access(path, os.X_OK):
        try:
            done = subprocess.run([str(path.resolve())], capture_output=True, text=True,
                                  timeout=60, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise refuse(f"the password script did not run: {exc}") from None
        if done.returncode != 0:
            raise refuse(f"the password script exited {done.returncode}")
        return done.stdout.strip()
    try:
        return read_text(path, limit=64 * 1024).strip()
    except UnreadableFile as exc:
        raise refuse(f"cannot read: {exc}") from None
    except OSError as exc:
        raise refuse(str(exc.strerror)) from None


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
