"""The controller's store of generated secrets (I/O), as kolla-genpwd keeps passwords.yml.

`<inventory>/.deploykit-secrets/` (0700, git-ignored by a `.gitignore` of its own, like
`.deploykit-tls/`) holds `secrets.yml` (0600): the secrets deploykit generated because the
inventory and vault leave them unset (config/site_secrets.py says which a site needs). Only
`deploykit up` (not --check) and `deploykit secrets generate|rotate` write it; every other
verb reads it, never writes. The file is one Ansible extra-vars document,
`deploykit_generated_secrets: {name: value}`, that fills only what a host's own variables
leave unset (roles/deploykit_common/tasks/settings.yml), so a plain ansible-playbook run
can take it with `-e @<store>/secrets.yml` and the vault still wins.
"""

from __future__ import annotations

import fcntl
import json
import os
import stat
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import yaml

from deploy_kit.config import site_secrets
from deploy_kit.config.site import Site
from deploy_kit.core.errors import DeployKitError
from deploy_kit.core.exit_codes import ExitCode
from deploy_kit.safe_read import UnreadableFile, read_text

STORE_DIR = ".deploykit-secrets"
STORE_FILE = "secrets.yml"
VARIABLE = "deploykit_generated_secrets"  # the one extra var the roles read
MAX_STORE_BYTES = 64 * 1024
HEADER = ("# deploykit's generated secrets (docs/security.md): never commit or share this\n"
          "# file. `deploykit secrets -i INV` says where each secret comes from.\n")


class SecretStoreError(DeployKitError):
    """The store exists but cannot be trusted or read (mode, type, content)."""

    exit_code = ExitCode.INVALID_INVENTORY


@dataclass(frozen=True)
class Fill:
    """The gaps of a run: each gap's value, and which of them were (or would be) generated."""

    values: dict[str, str]
    generated: tuple[str, ...]


def store_dir(site: Site) -> Path:
    return site.root / STORE_DIR


def store_path(site: Site) -> Path:
    return store_dir(site) / STORE_FILE


def read_store(site: Site) -> dict[str, str]:
    """The stored secrets ({} without a store). A store others may read, a link, or one that
    is not deploykit's document is refused: it would be a secret handed to anyone."""
    path = store_path(site)
    try:
        st = path.lstat()
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise SecretStoreError(f"cannot read {path}: {exc.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise SecretStoreError(f"{path} is not a regular file (a link or other)",
                               hint=f"remove it; `deploykit secrets -i {site.root} generate` "
                                    "writes a new store")
    if st.st_mode & 0o077:
        raise SecretStoreError(f"{path} is accessible to others (mode "
                               f"{stat.S_IMODE(st.st_mode):04o})",
                               hint=f"chmod 600 {path}, and rotate what others may have read")
    try:
        doc = yaml.safe_load(read_text(path, MAX_STORE_BYTES))
    except (UnreadableFile, yaml.YAMLError) as exc:
        raise SecretStoreError(f"{path} is not a readable YAML file: {str(exc)[:200]}",
                               hint="restore it from a backup, or remove it and rotate "
                                    "every generated secret") from None
    values = doc.get(VARIABLE) if isinstance(doc, dict) else None
    if not isinstance(values, dict) or not all(
            isinstance(k, str) and isinstance(v, str) and v for k, v in values.items()):
        raise SecretStoreError(f"{path} holds no `{VARIABLE}` mapping of names to strings",
                               hint="restore it from a backup, or remove it and rotate "
                                    "every generated secret")
    return {k: v for k, v in values.items()
            if k in site_secrets.GENERATED or k in site_secrets.NEXT.values()}


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
    return site_secrets.fill(site, stored) if stored else site


def _private_dir(path: Path) -> None:
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path, 0o700)
    ignore = path / ".gitignore"
    if not ignore.exists():  # the directory ignores itself, whatever the repository's rules
        ignore.write_text("# deploykit's generated secrets: never commit\n*\n")


def _write(path: Path, values: Mapping[str, str]) -> None:
    """0600 from its first byte (mkstemp), complete or absent (rename), on disk (fsync)."""
    text = HEADER + yaml.safe_dump({VARIABLE: dict(sorted(values.items()))},
                                   default_flow_style=False)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@contextmanager
def _locked(site: Site) -> Iterator[None]:
    """One writer at a time: two first `up`s must not each generate a different token."""
    _private_dir(store_dir(site))
    fd = os.open(store_dir(site) / ".lock", os.O_WRONLY | os.O_CREAT, 0o600)
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
    values |= {n: site_secrets.generate(n) for n in missing}
    return Fill(values | _with_next(stored, gaps), missing)


def ensure(site: Site) -> Fill:
    """The site's gaps, generating into the store those it does not hold yet (`up`)."""
    gaps = site_secrets.gaps(site)
    if not gaps:
        return Fill({}, ())
    with _locked(site):
        stored = read_store(site)
        missing = tuple(n for n in gaps if n not in stored)
        if missing:
            stored |= {n: site_secrets.generate(n) for n in missing}
            _write(store_path(site), stored)
    return Fill({n: stored[n] for n in gaps} | _with_next(stored, gaps), missing)


def rotate(site: Site, names: Sequence[str]) -> None:
    """New values for `names` in the store (the caller checked each may be rotated)."""
    with _locked(site):
        stored = read_store(site)
        stored |= {n: site_secrets.generate(n) for n in names}
        _write(store_path(site), stored)


def begin_rotation(site: Site, name: str) -> bool:
    """Store a next value for `name` (accepted beside the current one until
    finish_rotation); False when one is stored already (a rotation under way resumes)."""
    nxt = site_secrets.NEXT[name]
    with _locked(site):
        stored = read_store(site)
        if nxt in stored:
            return False
        stored[nxt] = site_secrets.generate(name)
        _write(store_path(site), stored)
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
        _write(store_path(site), stored)
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
