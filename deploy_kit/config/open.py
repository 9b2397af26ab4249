"""One call from an --inventory argument to a validated Site (no host is contacted)."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from deploy_kit.config.fit import with_server_l1
from deploy_kit.config.load import load_inventory, resolve_inventory_path
from deploy_kit.config.rules import validate_site
from deploy_kit.config.site import Site, build_site
from deploy_kit.core.errors import InventoryError, Problem
from deploy_kit.project import inventories_dir, project_dir

MAX_PASSWORD_BYTES = 64 * 1024
PASSWORD_SCRIPT_SECONDS = 60


def script_output(script: Path, limit: int = MAX_PASSWORD_BYTES,
                  timeout: float = PASSWORD_SCRIPT_SECONDS) -> str:
    """A password script's stdout, bounded like a file: at most `limit` bytes and `timeout`
    seconds, or ValueError (the script is killed). Its stderr stays on the terminal."""
    import selectors
    import subprocess
    import time

    proc = subprocess.Popen([str(script.resolve())], stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE)
    assert proc.stdout is not None
    out = bytearray()
    deadline = time.monotonic() + timeout
    try:
        with selectors.DefaultSelector() as selector:
            selector.register(proc.stdout, selectors.EVENT_READ)
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ValueError(f"it did not finish within {timeout:g} s")
                if not selector.select(left):
                    continue
                data = os.read(proc.stdout.fileno(), 65536)
                if not data:
                    break
                out += data
                if len(out) > limit:
                    raise ValueError(f"it printed more than {limit} bytes")
        code = proc.wait(timeout=max(0.1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        raise ValueError(f"it did not finish within {timeout:g} s") from None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
    if code != 0:
        raise ValueError(f"it exited {code}")
    return out.decode("utf-8", "replace")


def read_vault_password(path: Path | None) -> str | None:
    """The password, read as Ansible reads --vault-password-file: an executable file is a
    password script (its stdout), anything else a regular file (bounded, no FIFO)."""
    if path is None:
        return None
    from deploy_kit.safe_read import UnreadableFile, read_text

    def refuse(why: str) -> InventoryError:
        return InventoryError([Problem(str(path), "--vault-password-file", why,
                                       "pass a readable file or a password script")])

    if path.is_file() and os.access(path, os.X_OK):
        try:
            return script_output(path).strip()
        except OSError as exc:
            raise refuse(f"the password script did not run: {exc.strerror or exc}") from None
        except ValueError as exc:
            raise refuse(f"the password script failed: {exc}") from None
    try:
        return read_text(path, limit=MAX_PASSWORD_BYTES).strip()
    except UnreadableFile as exc:
        raise refuse(f"cannot read: {exc}") from None
    except OSError as exc:
        raise refuse(str(exc.strerror)) from None


def open_site(inventory: str, vault_password_file: Path | None = None) -> Site:
    path = resolve_inventory_path(inventory, project_dir(), inventories_dir())
    raw = load_inventory(path, read_vault_password(vault_password_file), collect=True)
    problems = list(raw.problems)
    if not raw.hosts_file_broken:  # without the host list, every rule would be a guess
        site, more = build_site(raw)
        site = with_server_l1(site)  # the LMCache server's computed L1 (config/fit.py)
        problems += more + validate_site(site)
    if problems:
        raise InventoryError(problems)
    if vault_password_file is not None:
        site = dataclasses.replace(site, vault_password_file=vault_password_file.resolve())
    return site
