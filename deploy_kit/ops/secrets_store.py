"""Where deploykit keeps the secrets it generated (I/O), as kolla-genpwd keeps passwords.yml.

The secrets deploykit generates because the inventory and vault leave them unset
(config/site_secrets.py says which a site needs) live in one of two files
(ops/secret_files.py reads and writes them):
- a site with a vault (a vault id or password given, on the command line, in
  ANSIBLE_VAULT_* or in ansible.cfg): `<inventory>/.deploykit-secrets.vault.yml`,
  ansible-vault encrypted and committed with the inventory, so a second controller (a CI
  runner's clone) converges the same site with the same secrets;
- a site without one: `<inventory>/.deploykit-secrets/secrets.yml` (0700 directory, 0600
  file, git-ignored), on this controller only; `validate` and `plan` warn about it, and
  `deploykit secrets move` puts it into the vault file once the site has a vault.
The vault file wins where it exists; a local store written before the site had a vault is
used until it is moved (nothing is ever generated over it). Only `deploykit up` (not
--check) and `deploykit secrets generate|rotate|move` write; every other verb reads. Either
file is one Ansible extra-vars document, `deploykit_generated_secrets: {name: value}`, that
fills only what a host's own variables leave unset (roles/deploykit_common/tasks/
settings.yml), so a plain ansible-playbook run takes it with `-e @<file>` (Ansible decrypts
the vault file itself) and the vault still wins.
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from deploy_kit.config import site_secrets
from deploy_kit.config.site import Site
from deploy_kit.core.errors import InventoryError
from deploy_kit.ops import secret_files as files
from deploy_kit.ops.secret_files import MAX_STORE_BYTES as MAX_STORE_BYTES
from deploy_kit.ops.secret_files import STORE_DIR as STORE_DIR
from deploy_kit.ops.secret_files import STORE_FILE as STORE_FILE
from deploy_kit.ops.secret_files import VARIABLE as VARIABLE
from deploy_kit.ops.secret_files import VAULT_FILE as VAULT_FILE
from deploy_kit.ops.secret_files import SecretStoreError as SecretStoreError
from deploy_kit.ops.secret_files import StoreLocked as StoreLocked


@dataclass(frozen=True)
class Fill:
    """The gaps of a run: each gap's value, and which of them were (or would be) generated."""

    values: dict[str, str]
    generated: tuple[str, ...]


def store_dir(site: Site) -> Path:
    """The local store's directory (a site without a vault)."""
    return site.root / STORE_DIR


def local_path(site: Site) -> Path:
    return store_dir(site) / STORE_FILE


def vault_path(site: Site) -> Path:
    return site.root / VAULT_FILE


def _present(path: Path) -> bool:
    return path.exists() or path.is_symlink()


def has_local_store(site: Site) -> bool:
    directory = store_dir(site)
    return directory.is_symlink() or (directory.exists() and not directory.is_dir()) or \
        _present(local_path(site))


def uses_vault(site: Site) -> bool:
    """The vault file holds the site's generated secrets: it exists, or the site has a vault
    and no local store written before it had one."""
    if _present(vault_path(site)):
        return True
    return bool(site.vault) and not has_local_store(site)


def store_path(site: Site) -> Path:
    """The file the site's generated secrets are (or will be) in."""
    return vault_path(site) if uses_vault(site) else local_path(site)


def read_store(site: Site) -> dict[str, str]:
    """The stored secrets ({} without a store). A store that is not exactly deploykit's
    (a link, others' access, an unknown name, a value the vault's rules refuse), or a vault
    file this run cannot open, is refused (exit 3)."""
    if uses_vault(site):
        return files.read_vault(vault_path(site), site.vault) or {}
    return files.read_local(store_dir(site)) or {}


def _refuse_copies(site: Site, values: Mapping[str, str]) -> None:
    """A stored secret pasted into a plain setting is refused as a vault one is: the
    setting would carry it into a 0644 file (config/rules_secrets.py)."""
    from deploy_kit.config.rules_secrets import no_secrets_in_plain_files

    if values:
        problems = list(no_secrets_in_plain_files(site_secrets.fill(site, values)))
        if problems:
            raise InventoryError(problems)


def _with_next(stored: Mapping[str, str], gaps: Sequence[str]) -> dict[str, str]:
    """The next value of each gap under rotation: every run hands it over, so a plain `up`
    in the middle of a rotation keeps both keys accepted."""
    return {site_secrets.NEXT[n]: stored[site_secrets.NEXT[n]] for n in gaps
            if n in site_secrets.NEXT and site_secrets.NEXT[n] in stored}


def not_generated(site: Site) -> list[str]:
    """The site's gaps the store does not hold yet: what the next `up` generates."""
    stored = read_store(site)
    return [n for n in site_secrets.gaps(site) if n not in stored]


def with_stored(site: Site) -> Site:
    """`site` with each gap the store covers filled (read-only: nothing is generated)."""
    stored = read_store(site)
    _refuse_copies(site, stored)
    return site_secrets.fill(site, stored) if stored else site


def move_to_vault(site: Site) -> tuple[Path, int] | None:
    """The local store's secrets moved into the vault file (merged with what it holds;
    a name both hold with different values is refused): written, read back and compared
    by decrypting, and only then the local store removed. (path, count), or None when
    there is no local store."""
    if not site.vault:
        raise SecretStoreError(
            f"{vault_path(site)}: {VARIABLE}: no vault secret was given to encrypt it with",
            hint="pass --vault-password-file FILE or --vault-id LABEL@FILE (or set "
                 "vault_password_file in ansible.cfg)")
    with _locked(site):
        local = files.read_local(store_dir(site))
        if local is None:
            return None
        held = files.read_vault(vault_path(site), site.vault) or {}
        differ = sorted(n for n in local if n in held and held[n] != local[n])
        if differ:
            raise SecretStoreError(
                f"{vault_path(site)}: {VARIABLE}.{differ[0]}: differs from the local store "
                f"{local_path(site)}",
                hint="keep the value the running site uses and remove the name from the "
                     "other file, then move again")
        merged = {**local, **held}
        files.write_vault(vault_path(site), merged, site.vault)
        if files.read_vault(vault_path(site), site.vault) != merged:
            raise SecretStoreError(f"{vault_path(site)}: {VARIABLE}: reads back different "
                                   "from what was written; the local store is kept",
                                   hint="check the disk, then move again")
        files.remove_local(store_dir(site))
    return vault_path(site), len(merged)


def warning(site: Site, command: str) -> str | None:
    """What validate and plan say about where the generated secrets live, when it is not
    the vault file: a site whose secrets exist on this controller only cannot be converged
    from another one (it would generate new ones over the running site's). `command`: the
    site's inventory as the fix's `-i` names it."""
    if uses_vault(site):
        if has_local_store(site):
            return (f"secrets: {local_path(site)} is left over beside {vault_path(site)}, "
                    f"which wins: remove it once `deploykit secrets list -i {command}` shows "
                    "every secret")
        return None
    if not (site_secrets.gaps(site) or has_local_store(site)):
        return None
    if site.vault:
        return (f"secrets: the generated secrets are in {local_path(site)}, on this "
                "controller only; another controller cannot converge this site: run "
                f"`deploykit secrets move -i {command}` (with the vault flags) to put them "
                f"into {vault_path(site)} and commit it")
    return (f"secrets: this site has no vault: its generated secrets live only in "
            f"{local_path(site)} on this controller, and another controller (a CI runner's "
            "clone) cannot converge it. Give it a vault (--vault-password-file, or "
            f"vault_password_file in ansible.cfg), then `deploykit secrets move -i {command}` "
            "and commit the vault file")


def _write(site: Site, values: Mapping[str, str]) -> Path:
    if uses_vault(site):
        return files.write_vault(vault_path(site), values, site.vault)
    return files.write_local(store_dir(site), values)


@contextmanager
def _locked(site: Site) -> Iterator[None]:
    """One writer at a time: two first `up`s must not each generate a different token. The
    lock is the inventory directory's own (flock on it): nothing is created to hold it."""
    fd = os.open(site.root, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def plan_fill(site: Site) -> Fill:
    """What a run would use for the site's gaps, writing nothing: stored values, and fresh
    values (kept in memory only) for the gaps the store does not hold (check mode)."""
    stored = read_store(site)
    gaps = site_secrets.gaps(site)
    missing = tuple(n for n in gaps if n not in stored)
    values = {n: stored[n] for n in gaps if n in stored}
    _refuse_copies(site, values)
    values |= {n: site_secrets.generate(n) for n in missing}
    return Fill(values | _with_next(stored, gaps), missing)


def ensure(site: Site) -> Fill:
    """The site's gaps, generating into the store those it does not hold yet (`up`)."""
    gaps = site_secrets.gaps(site)
    if not gaps:
        return Fill({}, ())
    with _locked(site):
        stored = read_store(site)
        _refuse_copies(site, {n: stored[n] for n in gaps if n in stored})
        missing = tuple(n for n in gaps if n not in stored)
        if missing:
            stored |= {n: site_secrets.generate(n) for n in missing}
            _write(site, stored)
    return Fill({n: stored[n] for n in gaps} | _with_next(stored, gaps), missing)


def forget(site: Site, values: Mapping[str, str]) -> tuple[str, ...]:
    """Take back what a refused run generated: each name still holding the value that run
    generated leaves the store (a store left empty goes whole), so the next run from this
    controller generates nothing over the running site's secrets either."""
    with _locked(site):
        stored = read_store(site)
        gone = tuple(n for n, v in values.items() if stored.get(n) == v)
        kept = {n: v for n, v in stored.items() if n not in gone}
        if gone and kept:
            _write(site, kept)
        elif gone and uses_vault(site):
            vault_path(site).unlink(missing_ok=True)
        elif gone:
            files.remove_local(store_dir(site))
    return gone


def rotate(site: Site, names: Sequence[str]) -> None:
    """New values for `names` in the store (the caller checked each may be rotated)."""
    with _locked(site):
        stored = read_store(site)
        stored |= {n: site_secrets.generate(n) for n in names}
        _write(site, stored)


def begin_rotation(site: Site, name: str) -> bool:
    """Store a next value for `name` (accepted beside the current one until
    finish_rotation); False when one is stored already (a rotation under way resumes)."""
    nxt = site_secrets.NEXT[name]
    with _locked(site):
        stored = read_store(site)
        if nxt in stored:
            return False
        stored[nxt] = site_secrets.generate(name)
        _write(site, stored)
    return True


def finish_rotation(site: Site, name: str) -> bool:
    """The next value of `name` becomes its value (the old one is forgotten); False when no
    rotation is under way."""
    nxt = site_secrets.NEXT[name]
    with _locked(site):
        stored = read_store(site)
        if nxt not in stored:
            return False
        stored[name] = stored.pop(nxt)
        _write(site, stored)
    return True


@contextmanager
def handover(values: Mapping[str, str]) -> Iterator[Path | None]:
    """An extra-vars file for one ansible-playbook run holding only `values` (the run's
    gaps): 0600 in a 0700 directory removed afterwards, so no value is in argv, the
    environment, the run record or a log. None when there is nothing to hand over."""
    if not values:
        yield None
        return
    with tempfile.TemporaryDirectory(prefix="deploykit-secrets-") as private:
        os.chmod(private, 0o700)
        path = Path(private) / "generated.json"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as handle:
            json.dump({VARIABLE: dict(values)}, handle)
        yield path
