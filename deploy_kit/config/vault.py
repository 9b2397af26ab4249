"""Vault secrets as Ansible has them: identities parsed once, secrets loaded once per run.

Where they come from, in ansible-playbook's order (ansible.cli.CLI._play_prereqs and
setup_vault_secrets): the configured identity list (ANSIBLE_VAULT_IDENTITY_LIST, else
ansible.cfg's `vault_identity_list`), then each --vault-id (`label@file`, `file`,
`label@prompt`), then each --vault-password-file and the configured password file
(ANSIBLE_VAULT_PASSWORD_FILE, else ansible.cfg's `vault_password_file`), labelled
`vault_identity` (`default`), then -J/--ask-vault-pass (a prompt). The configured values are
Ansible's own (its ConfigManager over the ansible.cfg it would find), so a vault set up only
in ansible.cfg works for every verb. A file is read as Ansible reads it: an executable is a
password script (a `*-client` script gets `--vault-id LABEL`), anything else a password
file; both bounded here (size, time; a script runs in its own process group, killed whole
at the limit), which is why the passwords are not read by setup_vault_secrets itself (it
waits on a script for ever). Decryption is Ansible's own VaultLib over every (label,
secret) pair, so a `$ANSIBLE_VAULT;1.2;AES256;prod` file is matched by id.

The loaded secrets travel as one `VaultSecrets` value. ansible-playbook gets them from
`materialized()`: one 0600 file per identity in a private directory removed after the run,
so a prompt is answered once and no secret is ever in argv or the environment.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deploy_kit.core.errors import InventoryError, Problem

DEFAULT_ID = "default"  # Ansible's C.DEFAULT_VAULT_IDENTITY
PROMPTS = ("prompt", "prompt_ask_vault_pass")
MAX_PASSWORD_BYTES = 64 * 1024
PASSWORD_SCRIPT_SECONDS = 60
CLIENT_UNKNOWN_ID_RC = 2  # ansible.parsing.vault.ClientScriptVaultSecret.VAULT_ID_UNKNOWN_RC
# Ansible's own variables: read here for the inventory, kept from the ansible-playbook that
# deploykit starts (it gets every identity as a file instead, so nothing is asked twice)
ENV_IDENTITY_LIST = "ANSIBLE_VAULT_IDENTITY_LIST"
ENV_PASSWORD_FILE = "ANSIBLE_VAULT_PASSWORD_FILE"


@dataclass(frozen=True)
class VaultIdentity:
    """One place a vault password comes from: `label@source`, source a path or `prompt`."""

    label: str
    source: str
    given_as: str  # the flag or variable it came from: named in errors and --print-command

    @property
    def prompt(self) -> bool:
        return self.source in PROMPTS

    def __str__(self) -> str:
        return f"{self.label}@{self.source}"


def split_identity(slug: str, given_as: str = "--vault-id") -> VaultIdentity:
    """`prod@F` -> (prod, F); `F` -> (default, F); `prod@prompt` -> a prompt, as Ansible's
    CLI.split_vault_id (the first `@` splits; no label means `default`)."""
    label, at, source = slug.partition("@")
    if not at:
        label, source = "", slug
    if not source:
        raise InventoryError([Problem(slug, given_as, "names no password file",
                                      "write LABEL@FILE, FILE or LABEL@prompt")])
    return VaultIdentity(label or DEFAULT_ID, source, given_as)


@dataclass(frozen=True)
class Configured:
    """The vault settings Ansible reads beside the command line: each value and where it
    was set (the variable, or `<ansible.cfg> vault_…`), as ansible-playbook would see them."""

    identity_list: tuple[str, ...] = ()
    identity_list_from: str = ENV_IDENTITY_LIST
    password_file: str | None = None
    password_file_from: str = ENV_PASSWORD_FILE
    label: str = DEFAULT_ID  # vault_identity: the label of password files and -J
    encrypt_label: str | None = None  # vault_encrypt_identity: the id new files take


def configured(env: Mapping[str, str] | None = None) -> Configured:
    """The vault settings of this process's environment and the ansible.cfg Ansible finds
    (ANSIBLE_CONFIG, ./ansible.cfg, ~/.ansible.cfg, /etc/ansible/ansible.cfg); `env` given:
    those variables only, no ansible.cfg (a caller that states every input)."""
    if env is not None:
        listed = tuple(s.strip() for s in env.get(ENV_IDENTITY_LIST, "").split(",") if s.strip())
        return Configured(listed, password_file=env.get(ENV_PASSWORD_FILE) or None)
    from ansible.config.manager import ConfigManager, find_ini_config_file
    from ansible.errors import AnsibleError

    from deploy_kit.core.errors import EnvironmentProblem

    found = find_ini_config_file()
    try:
        manager = ConfigManager(found)

        def value(name: str) -> tuple[Any, str]:
            got, origin = manager.get_config_value_and_origin(name)
            origin = str(origin)
            where = origin.split(":", 1)[1].strip() if origin.startswith("env:") else \
                f"{origin} {_INI_KEYS[name]}"
            return got, where

        listed, listed_from = value("DEFAULT_VAULT_IDENTITY_LIST")
        password, password_from = value("DEFAULT_VAULT_PASSWORD_FILE")
        label, _ = value("DEFAULT_VAULT_IDENTITY")
        encrypt, _ = value("DEFAULT_VAULT_ENCRYPT_IDENTITY")
    except AnsibleError as exc:  # ansible-playbook would stop on it too
        first = str(getattr(exc, "message", exc)).splitlines()[0]
        raise EnvironmentProblem(f"Ansible cannot read its configuration: {first}",
                                 hint="fix the file, or point ANSIBLE_CONFIG at another") from None
    return Configured(tuple(str(s).strip() for s in listed or () if str(s).strip()), listed_from,
                      str(password) if password else None, password_from,
                      str(label or DEFAULT_ID), str(encrypt) if encrypt else None)


# the ansible.cfg [defaults] keys, named in errors about a configured identity
_INI_KEYS = {"DEFAULT_VAULT_IDENTITY_LIST": "vault_identity_list",
             "DEFAULT_VAULT_PASSWORD_FILE": "vault_password_file",
             "DEFAULT_VAULT_IDENTITY": "vault_identity",
             "DEFAULT_VAULT_ENCRYPT_IDENTITY": "vault_encrypt_identity"}


def parse_identities(vault_ids: Sequence[str] = (), password_files: Sequence[Path | str] = (),
                     ask: bool = False, env: Mapping[str, str] | None = None
                     ) -> tuple[VaultIdentity, ...]:
    """Every identity of a run, in the order ansible-playbook tries them (`env`: as for
    configured())."""
    config = configured(env)
    found = [split_identity(s, config.identity_list_from) for s in config.identity_list]
    found += [split_identity(s) for s in vault_ids]
    found += [VaultIdentity(config.label, str(p), "--vault-password-file")
              for p in password_files]
    if config.password_file:
        found.append(VaultIdentity(config.label, config.password_file,
                                   config.password_file_from))
    if ask:
        found.append(VaultIdentity(config.label, "prompt_ask_vault_pass", "--ask-vault-pass"))
    return tuple(found)


@dataclass(frozen=True)
class VaultSecrets:
    """The vault secrets of one run: (label, secret) pairs in Ansible's order, and the
    identities they came from. Empty: no secret given (vaulted values stay locked)."""

    identities: tuple[VaultIdentity, ...] = ()
    # (label, ansible.parsing.vault.VaultSecret); never printed
    pairs: tuple[tuple[str, Any], ...] = field(default=(), repr=False, compare=False)

    def __bool__(self) -> bool:
        return bool(self.pairs)

    @property
    def labels(self) -> list[str]:
        return list(dict.fromkeys(label for label, _ in self.pairs))

    @classmethod
    def of_pairs(cls, pairs: Sequence[tuple[str, Any]]) -> VaultSecrets:
        """Secrets Ansible already holds (an action plugin's loader)."""
        return cls(tuple(VaultIdentity(str(label), "(ansible-playbook)", "ansible-playbook")
                         for label, _ in pairs), tuple((str(k), v) for k, v in pairs))

    def decrypt(self, text: str, path: str, key: str = "(file)") -> str:
        """The plaintext, or InventoryError naming the file, the ids given and the id the
        file asks for."""
        from ansible.parsing.vault import VaultLib

        try:
            return str(VaultLib(list(self.pairs)).decrypt(text).decode())
        except Exception:  # ansible raises several types for a wrong password or a bad file
            raise InventoryError([self.cannot_decrypt(text, path, key)]) from None

    def cannot_decrypt(self, text: str, path: str, key: str = "(file)") -> Problem:
        wanted = vault_id_of(text)
        given = ", ".join(self.labels) or "none"
        if not self.pairs:
            return Problem(path, key, "is vault-encrypted and no vault secret was given",
                           fix_for(wanted))
        if wanted and wanted not in self.labels:
            return Problem(path, key, f"is encrypted with vault id {wanted!r}; ids given: "
                           f"{given}", fix_for(wanted))
        return Problem(path, key, f"cannot decrypt with the vault secrets given (ids: {given})",
                       "check the password of " + (f"id {wanted!r}" if wanted else "each id"))

    @contextmanager
    def materialized(self) -> Iterator[Handover]:
        """What an ansible-playbook started for the block gets: `--vault-id LABEL@FILE` per
        identity, each FILE 0600 in a 0700 directory removed afterwards."""
        if not self.pairs:
            yield Handover([], {})
            return
        with tempfile.TemporaryDirectory(prefix="deploykit-vault-") as private:
            os.chmod(private, 0o700)
            slugs: list[str] = []
            for n, (label, secret) in enumerate(self.pairs):
                path = Path(private) / f"{n}-{label}"
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "wb") as handle:
                    handle.write(secret.bytes + b"\n")
                slugs.append(f"{label}@{path}")
            # the child inherits this process's variables and reads the same ansible.cfg:
            # where they name an identity (a script, a prompt) they now name an already-read
            # file, so nothing runs or asks twice (a variable outranks ansible.cfg; an empty
            # value would not do: Ansible reads it as a path)
            given = {i.given_as for i in self.identities}
            env = {name: slugs[0] if name == ENV_IDENTITY_LIST else slugs[0].split("@", 1)[1]
                   for name, key in ((ENV_IDENTITY_LIST, "vault_identity_list"),
                                     (ENV_PASSWORD_FILE, "vault_password_file"))
                   if os.environ.get(name) or any(g.endswith(f" {key}") for g in given)}
            yield Handover([w for slug in slugs for w in ("--vault-id", slug)], env)


@dataclass(frozen=True)
class Handover:
    """The vault flags and variables for a child ansible-playbook (paths, no secret)."""

    argv: list[str]
    env: dict[str, str]


def command_flags(identities: Sequence[VaultIdentity]) -> list[str]:
    """The flags a user gave, as ansible-playbook takes them (--print-command): the
    variables are left to ansible-playbook, which reads them itself."""
    argv: list[str] = []
    for identity in identities:
        source = identity.source if identity.prompt else \
            str(Path(identity.source).expanduser().resolve())  # from any directory
        if identity.given_as == "--vault-id":
            argv += ["--vault-id", f"{identity.label}@{source}"]
        elif identity.given_as == "--vault-password-file":
            argv += ["--vault-password-file", source]
        elif identity.given_as == "--ask-vault-pass":
            argv.append("--ask-vault-pass")
    return argv


def vault_id_of(text: str) -> str | None:
    """The id in a `$ANSIBLE_VAULT;1.2;AES256;ID` header (None for 1.1 files)."""
    parts = text.lstrip().split("\n", 1)[0].strip().split(";")
    return parts[3] if len(parts) > 3 and parts[3] else None


def fix_for(wanted: str | None) -> str:
    return (f"pass --vault-id {wanted}@FILE (or {wanted}@prompt)" if wanted else
            "pass --vault-password-file, --vault-id or --ask-vault-pass")


def load_secrets(identities: Sequence[VaultIdentity], ask: Any = None) -> VaultSecrets:
    """Read every identity once: files, password scripts, prompts (asked here, once).
    Any identity that gives no password is an error naming it (exit 3)."""
    from ansible.parsing.vault import VaultSecret, script_is_client

    pairs: list[tuple[str, Any]] = []
    for identity in identities:
        if identity.prompt:
            password = (ask or _ask)(identity)
        else:
            path = Path(identity.source).expanduser()
            client = script_is_client(str(path))
            password = read_password(path, identity, identity.label if client else None)
        if not password:
            raise InventoryError([Problem(identity.source, identity.given_as,
                                          "gave an empty vault password",
                                          "put the password in it")])
        pairs.append((identity.label, VaultSecret(password.encode())))
    return VaultSecrets(tuple(identities), tuple(pairs))


def _ask(identity: VaultIdentity) -> str:
    import getpass
    import sys

    if not sys.stdin.isatty():
        raise InventoryError([Problem(str(identity), identity.given_as, "needs a terminal to "
                                      "ask for the password",
                                      "pass --vault-id LABEL@FILE or --vault-password-file")])
    # Ansible's own prompts (AWX/Tower match `Vault password:` for --ask-vault-pass)
    text = "Vault password: " if identity.source == "prompt_ask_vault_pass" else \
        f"Vault password ({identity.label}): "
    return getpass.getpass(text)


def read_password(path: Path, identity: VaultIdentity, client_id: str | None = None) -> str:
    """As Ansible's get_file_vault_secret: an executable file is a password script (a
    client script is asked for `client_id`), anything else a file; stripped."""
    from deploy_kit.safe_read import UnreadableFile, read_text

    def refuse(why: str) -> InventoryError:
        return InventoryError([Problem(str(path), identity.given_as, why,
                                       "pass a readable file or a password script")])

    if path.is_file() and os.access(path, os.X_OK):
        args = ["--vault-id", client_id] if client_id else []
        try:
            return script_output(path, args=args).strip()
        except OSError as exc:
            raise refuse(f"the password script did not run: {exc.strerror or exc}") from None
        except ValueError as exc:
            if client_id and str(exc) == f"it exited {CLIENT_UNKNOWN_ID_RC}":
                raise refuse(f"the client script knows no vault id {client_id!r}") from None
            raise refuse(f"the password script failed: {exc}") from None
    try:
        return read_text(path, limit=MAX_PASSWORD_BYTES).strip()
    except UnreadableFile as exc:
        raise refuse(f"cannot read: {exc}") from None
    except OSError as exc:
        raise refuse(str(exc.strerror)) from None


def script_output(script: Path, limit: int = MAX_PASSWORD_BYTES,
                  timeout: float = PASSWORD_SCRIPT_SECONDS, args: Sequence[str] = ()) -> str:
    """A password script's stdout, bounded like a file: at most `limit` bytes and `timeout`
    seconds, or ValueError. The script runs in a process group of its own, killed whole
    when it returns or at the limit: a child it left behind (`sleep 600 &`, a grandchild
    holding stdout) neither outlives the call nor keeps the caller's pipe open. Its stderr
    stays on the terminal."""
    import selectors
    import subprocess
    import time

    proc = subprocess.Popen([str(script.resolve()), *args], stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, start_new_session=True)
    assert proc.stdout is not None
    out = bytearray()
    deadline = time.monotonic() + timeout
    try:
        with selectors.DefaultSelector() as selector:
            selector.register(proc.stdout, selectors.EVENT_READ)
            exited = False
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ValueError(f"it did not finish within {timeout:g} s")
                if not selector.select(0 if exited else min(left, 0.2)):
                    if exited:  # drained; a child of it may still hold the pipe open
                        break
                    exited = proc.poll() is not None
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
        _kill_group(proc.pid)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
    if code != 0:
        raise ValueError(f"it exited {code}")
    return out.decode("utf-8", "replace")


def _kill_group(pgid: int) -> None:
    """SIGKILL every process left in the script's group (none left: nothing to do)."""
    import signal

    with suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def from_password_file(path: Path | None) -> VaultSecrets:
    """One --vault-password-file (the single-password callers of open_site)."""
    if path is None:
        return VaultSecrets()
    return load_secrets(parse_identities(password_files=[path], env={}))
