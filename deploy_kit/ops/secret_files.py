"""The two files the generated secrets live in, read and written without trusting them
(I/O; ops/secrets_store.py chooses between them).

- The vault file `<inventory>/.deploykit-secrets.vault.yml`: ansible-vault encrypted,
  committed with the inventory (kolla's passwords.yml + ansible-vault), so every controller
  with the site's vault has the site's secrets.
- The local store `<inventory>/.deploykit-secrets/secrets.yml` of a site without a vault:
  a 0700 directory of this user's, never a link (opened O_NOFOLLOW|O_DIRECTORY, its owner
  and mode checked on the open descriptor), the file opened relative to it, O_NOFOLLOW.

Both hold one document, `deploykit_generated_secrets: {name: value}`, and nothing else: an
unknown key or name, or a value the vault's rules refuse, is refused naming the file and the
key. No error ever quotes the file's text (a YAML error names the line only).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from deploy_kit.config import site_secrets
from deploy_kit.config.vault import VaultSecrets, configured
from deploy_kit.core.errors import DeployKitError
from deploy_kit.core.exit_codes import ExitCode

STORE_DIR = ".deploykit-secrets"
STORE_FILE = "secrets.yml"
VAULT_FILE = ".deploykit-secrets.vault.yml"
VARIABLE = "deploykit_generated_secrets"  # the one extra var the roles read
MAX_STORE_BYTES = 64 * 1024
LOCAL_HEADER = ("# deploykit's generated secrets (docs/security.md): never commit or share\n"
                "# this file. `deploykit secrets list -i INV` says where each comes from.\n")
VAULT_HEADER_TEXT = ("# deploykit's generated secrets (docs/security.md), ansible-vault\n"
                     "# encrypted: commit this file with the inventory.\n")
RESTORE = "restore it from a backup (or git), or remove it and rotate every generated secret"


class SecretStoreError(DeployKitError):
    """The store exists but cannot be trusted or read (link, owner, mode, type, content)."""

    exit_code = ExitCode.INVALID_INVENTORY


class StoreLocked(SecretStoreError):
    """The vault file exists and this run was given no vault secret to open it."""


def shown(text: object) -> str:
    """A key name as it may appear in an error: printable ASCII only, short."""
    clean = "".join(c if " " <= c <= "~" else "?" for c in str(text))
    return clean[:40] + ("…" if len(clean) > 40 else "")


def refuse(path: Path, key: str, why: str, fix: str = RESTORE) -> SecretStoreError:
    return SecretStoreError(f"{path}: {key}: {why}", hint=fix)


# --- the document -------------------------------------------------------------------------

def parse(text: str, path: Path) -> dict[str, str]:
    """The secrets of one store document, every rule checked; never quotes `text`."""
    from deploy_kit.safe_read import UnreadableFile, load_yaml

    try:
        doc, duplicates = load_yaml(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        line = f" (line {mark.line + 1})" if mark is not None else ""
        raise refuse(path, VARIABLE, f"is not valid YAML{line}") from None
    except UnreadableFile:  # its message may quote a value: name the file only
        raise refuse(path, VARIABLE, "is not a YAML document deploykit can read") from None
    if duplicates:
        raise refuse(path, shown(duplicates[0][0]), f"is given twice (line {duplicates[0][1]})")
    if not isinstance(doc, dict) or VARIABLE not in doc:
        raise refuse(path, VARIABLE, "is missing (deploykit's store holds this one mapping)")
    extra = sorted(shown(k) for k in doc if k != VARIABLE)
    if extra:
        raise refuse(path, extra[0], f"is not allowed: the store holds `{VARIABLE}` only "
                     "(a plain ansible-playbook run would apply it as an extra var)",
                     f"remove it from {path.name}")
    values = doc[VARIABLE]
    if not isinstance(values, dict):
        raise refuse(path, VARIABLE, "is not a mapping of names to values")
    return {str(k): v for k, v in check_values(values, path).items()}


def check_values(values: Mapping[Any, Any], path: Path) -> dict[str, str]:
    for name, value in values.items():
        key = f"{VARIABLE}.{shown(name)}"
        if not isinstance(name, str) or name not in site_secrets.STORABLE:
            raise refuse(path, key, "is not a secret deploykit generates",
                         f"remove it from {path.name}")
        if not isinstance(value, str) or not value:
            raise refuse(path, key, "is not a non-empty string")
        if why := site_secrets.value_problem(name, value):
            raise refuse(path, key, why, RESTORE)
    return dict(values)


def document(values: Mapping[str, str]) -> str:
    return yaml.safe_dump({VARIABLE: dict(sorted(values.items()))}, default_flow_style=False)


# --- the local store ----------------------------------------------------------------------

def _no_follow_flags() -> int:
    return os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def open_dir(directory: Path, create: bool) -> int | None:
    """The store directory's descriptor, checked (None: absent and not to be created)."""
    fix = (f"remove {directory} if it is not yours and run again; else `chmod 700` it "
           "(and rotate what others may have read)")
    made = False
    if create:
        try:
            os.mkdir(directory, 0o700)  # never follows a link: an existing one is refused
            made = True
        except FileExistsError:
            pass
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | _no_follow_flags())
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            _refuse_dir(directory, "a link or not a directory", fix)
        raise refuse(directory, STORE_DIR, f"cannot be opened: {exc.strerror}", fix) from None
    if made:  # whatever the umask
        os.fchmod(fd, 0o700)
    info = os.fstat(fd)
    mode = stat.S_IMODE(info.st_mode)
    why = (f"owned by another user (uid {info.st_uid})" if info.st_uid != os.geteuid()
           else f"mode {mode:04o}, not 0700" if mode != 0o700 else None)
    if why:
        os.close(fd)
        _refuse_dir(directory, why, fix)
    return fd


def _refuse_dir(directory: Path, why: str, fix: str) -> Any:
    raise refuse(directory, STORE_DIR, f"is {why}: deploykit never reads or writes secrets "
                 "through it", fix)


def read_local(directory: Path) -> dict[str, str] | None:
    """The local store's secrets (None: no store)."""
    dfd = open_dir(directory, create=False)
    if dfd is None:
        return None
    path = directory / STORE_FILE
    try:
        try:
            fd = os.open(STORE_FILE, os.O_RDONLY | os.O_NONBLOCK | _no_follow_flags(),
                         dir_fd=dfd)
        except FileNotFoundError:
            return None
        except OSError as exc:
            why = "a link" if exc.errno == errno.ELOOP else f"unreadable ({exc.strerror})"
            raise refuse(path, VARIABLE, f"is {why}",
                         f"remove it; `deploykit secrets generate -i {directory.parent}` "
                         "writes a new store") from None
        try:
            return parse(_read_fd(fd, path), path)
        finally:
            os.close(fd)
    finally:
        os.close(dfd)


def _read_fd(fd: int, path: Path) -> str:
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        raise refuse(path, VARIABLE, "is not a regular file (a FIFO, device or directory)",
                     f"remove it; `deploykit secrets generate -i {path.parent.parent}` "
                     "writes a new store")
    if info.st_uid != os.geteuid():
        raise refuse(path, VARIABLE, f"is owned by another user (uid {info.st_uid})")
    if info.st_mode & 0o077:
        raise refuse(path, VARIABLE, f"is accessible to others (mode "
                     f"{stat.S_IMODE(info.st_mode):04o})",
                     f"chmod 600 {path}, and rotate what others may have read")
    if info.st_size > MAX_STORE_BYTES:
        raise refuse(path, VARIABLE, f"is {info.st_size:,} bytes (limit {MAX_STORE_BYTES:,})")
    data = os.read(fd, MAX_STORE_BYTES + 1)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise refuse(path, VARIABLE, "is not UTF-8 text") from None


def write_local(directory: Path, values: Mapping[str, str]) -> Path:
    """0600 from its first byte, complete or absent (rename), on disk (fsync of the file
    and of the directory), only inside the checked directory."""
    dfd = open_dir(directory, create=True)
    assert dfd is not None
    try:
        _ignore_self(dfd)
        _replace_at(dfd, STORE_FILE, (LOCAL_HEADER + document(values)).encode())
    finally:
        os.close(dfd)
    return directory / STORE_FILE


def _ignore_self(dfd: int) -> None:
    """The directory ignores itself, whatever the repository's rules."""
    try:
        fd = os.open(".gitignore", os.O_WRONLY | os.O_CREAT | os.O_EXCL | _no_follow_flags(),
                     0o600, dir_fd=dfd)
    except FileExistsError:
        return
    with os.fdopen(fd, "w") as handle:
        handle.write("# deploykit's generated secrets: never commit\n*\n")


def _replace_at(dfd: int, name: str, data: bytes) -> None:
    tmp = f".{name}.{os.getpid()}.{os.urandom(4).hex()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _no_follow_flags(), 0o600,
                 dir_fd=dfd)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        os.fsync(dfd)  # the rename itself on disk: a crash now keeps the new store
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp, dir_fd=dfd)
        raise


def remove_local(directory: Path) -> None:
    """The local store gone (after its secrets moved into the vault file)."""
    dfd = open_dir(directory, create=False)
    if dfd is None:
        return
    try:
        for name in os.listdir(dfd):
            os.unlink(name, dir_fd=dfd)
    finally:
        os.close(dfd)
    os.rmdir(directory)


# --- the vault file -----------------------------------------------------------------------

def read_vault(path: Path, vault: VaultSecrets) -> dict[str, str] | None:
    """The vault file's secrets (None: no file)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | _no_follow_flags())
    except FileNotFoundError:
        return None
    except OSError as exc:
        why = "a link" if exc.errno == errno.ELOOP else f"unreadable ({exc.strerror})"
        raise refuse(path, VARIABLE, f"is {why}", RESTORE) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > 4 * MAX_STORE_BYTES:
            raise refuse(path, VARIABLE, "is not a regular file of at most "
                         f"{4 * MAX_STORE_BYTES:,} bytes", RESTORE)
        text = os.read(fd, 4 * MAX_STORE_BYTES + 1).decode("utf-8", "replace")
    finally:
        os.close(fd)
    if not text.lstrip().startswith("$ANSIBLE_VAULT"):
        raise refuse(path, VARIABLE, "is not vault-encrypted: it would put the site's "
                     "secrets in git in plain text",
                     f"encrypt it (`ansible-vault encrypt {path}`) and rotate every secret "
                     "in it")
    if not vault:
        raise StoreLocked(f"{path}: {VARIABLE}: is vault-encrypted and no vault secret was "
                          "given", hint="pass --vault-password-file FILE or --vault-id "
                                        "LABEL@FILE (or set vault_password_file in ansible.cfg)")
    return parse(vault.decrypt(text, str(path), VARIABLE), path)


def encrypt_secret(path: Path, vault: VaultSecrets) -> tuple[str, Any]:
    """(label, secret) the vault file is written with: the one that opens it now; else
    ansible.cfg's `vault_encrypt_identity` (ANSIBLE_VAULT_ENCRYPT_IDENTITY); else the first
    secret ansible-playbook would try, as `ansible-vault encrypt` picks it."""
    from ansible.parsing.vault import VaultLib

    pairs = list(vault.pairs)
    try:
        text = path.read_text()
        _plain, label, secret = VaultLib(pairs).decrypt_and_get_vault_id(text)
        return str(label), secret
    except Exception:  # no file yet, or one these secrets no longer open
        pass
    wanted = configured().encrypt_label
    if wanted:
        found = [(label, secret) for label, secret in pairs if label == wanted]
        if not found:
            raise refuse(path, VARIABLE, f"vault_encrypt_identity is {shown(wanted)!r}, and "
                         f"no such vault id was given (ids: {', '.join(vault.labels)})",
                         f"pass --vault-id {shown(wanted)}@FILE")
        return found[0]
    return pairs[0]


def write_vault(path: Path, values: Mapping[str, str], vault: VaultSecrets) -> Path:
    """Encrypted with encrypt_secret's choice (a `default` id writes a 1.1 header, as
    ansible-vault does), 0600, complete or absent, on disk."""
    from ansible.parsing.vault import VaultLib

    label, secret = encrypt_secret(path, vault)
    text = VaultLib([(label, secret)]).encrypt(
        VAULT_HEADER_TEXT + document(values), secret,
        vault_id=None if label == "default" else label)
    dfd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
    try:
        _replace_at(dfd, path.name, text)
    finally:
        os.close(dfd)
    return path
