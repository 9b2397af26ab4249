"""What a run is asked to do, as plain values: the vault flags, the Ansible flags of a
playbook run, how hosts are reached; and -K answered once per run."""

from __future__ import annotations

import dataclasses
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from deploy_kit.core.errors import BadInput

if TYPE_CHECKING:
    from deploy_kit.config.site import Site
    from deploy_kit.config.vault import VaultIdentity, VaultSecrets


@dataclass(frozen=True)
class VaultOptions:
    """The vault flags of one command; `secrets()` reads them (and the variables) once."""

    vault_ids: tuple[str, ...] = ()
    password_files: tuple[Path, ...] = ()
    ask: bool = False

    @classmethod
    def of(cls, vault_id: list[str] | None = None, vault_password_file: list[Path] | None = None,
           ask_vault_pass: bool = False) -> VaultOptions:
        return cls(tuple(vault_id or ()), tuple(vault_password_file or ()), ask_vault_pass)

    def identities(self) -> tuple[VaultIdentity, ...]:
        from deploy_kit.config.vault import parse_identities

        return parse_identities(self.vault_ids, self.password_files, self.ask)

    def secrets(self) -> VaultSecrets:
        """Every password read now; a prompt asks here, once for the whole run."""
        from deploy_kit.config.vault import load_secrets

        return load_secrets(self.identities())


@dataclass(frozen=True)
class AnsibleOptions:
    """The flags `up`/`down` hand to ansible-playbook."""

    limit: str | None = None
    tags: tuple[str, ...] = ()
    skip_tags: tuple[str, ...] = ()
    check: bool = False
    diff: bool = False
    extra_vars: tuple[Path, ...] = ()  # -e @file
    inline_vars: tuple[str, ...] = ()  # -e key=value / -e '{"key": value}'
    print_command: bool = False
    verbose: int = 0
    become: bool = False
    forks: int | None = None

    @classmethod
    def of(cls, *, limit: str | None = None, tags: list[str] | None = None,
           skip_tags: list[str] | None = None, check: bool = False, diff: bool = False,
           extra_vars: list[str] | None = None, print_command: bool = False,
           verbose: int = 0, become: bool = False, forks: int | None = None
           ) -> AnsibleOptions:
        # typer hands list options over as None when absent; -e as ansible-playbook reads it
        values = [str(v) for v in extra_vars or []]
        files = tuple(Path(v[1:]).resolve() for v in values if v.startswith("@"))
        inline = tuple(v for v in values if not v.startswith("@"))
        # --tags a,b and --tags a --tags b mean the same, as for ansible-playbook
        def split(items: list[str] | None) -> tuple[str, ...]:
            return tuple(t.strip() for i in items or () for t in i.split(",") if t.strip())
        return cls(limit, split(tags), split(skip_tags), check, diff, files, inline,
                   print_command, verbose, become, forks)


@dataclass(frozen=True)
class ConnectionOptions:
    """How Ansible reaches the hosts: the same flags for a playbook run (up/down) and for
    the read-only scripts of verify, doctor, cache and bench (deploy_kit.transport)."""

    become: bool = False
    ask_become_pass: bool = False
    become_user: str | None = None
    user: str | None = None
    private_key: Path | None = None
    forks: int | None = None
    # -K: the password asked once, in a 0600 file of a private directory for this run only
    become_password_file: Path | None = None

    def argv(self) -> list[str]:
        """ansible-playbook's own flags; a password is never one of them (pure)."""
        argv: list[str] = []
        if self.become:
            argv.append("--become")
        if self.become_user:
            argv += ["--become-user", self.become_user]
        if self.become_password_file is not None:
            argv += ["--become-password-file", str(self.become_password_file)]
        elif self.ask_become_pass:  # not asked yet (--print-command): Ansible asks itself
            argv.append("--ask-become-pass")
        if self.user:
            argv += ["--user", self.user]
        if self.private_key is not None:
            argv += ["--private-key", str(self.private_key.resolve())]
        if self.forks:
            argv += ["--forks", str(self.forks)]
        return argv


@contextmanager
def reaching(connection: ConnectionOptions, ask: bool = True) -> Iterator[ConnectionOptions]:
    """The options with -K answered: the password typed once, kept for this run only in a
    0600 file of a private directory (ansible-playbook's --become-password-file reads it),
    removed afterwards. It is never in argv, the environment, a log or a run record.
    `ask=False` (--print-command): left for Ansible to ask."""
    if not (connection.ask_become_pass and ask) or connection.become_password_file:
        yield connection
        return
    import getpass
    import sys

    if not sys.stdin.isatty():
        raise BadInput("needs a terminal; set ansible_become_password in a vaulted "
                       "file, or use passwordless sudo", param_hint="--ask-become-pass")
    password = getpass.getpass("BECOME password: ")
    with tempfile.TemporaryDirectory(prefix="deploykit-become-") as private:
        os.chmod(private, 0o700)
        path = Path(private) / "become-password"
        path.touch(mode=0o600)
        path.write_text(password + "\n")
        yield dataclasses.replace(connection, become_password_file=path)


def on_site(site: Site, connection: ConnectionOptions) -> Site:
    """The site whose host contacts (deploy_kit.transport.hosts) use these flags."""
    return dataclasses.replace(site, connection=tuple(connection.argv()))


@contextmanager
def reached_site(inventory: list[str], vault: VaultOptions,
                 connection: ConnectionOptions) -> Iterator[Site]:
    """The site a host-reading verb works on: vault secrets read once (a prompt asks here),
    -K answered once, and its host contacts using the connection flags."""
    from deploy_kit.ops.secrets_store import with_stored
    from deploy_kit.ops.site import open_site

    secrets = vault.secrets()
    with reaching(connection) as reach:
        # the generated secrets (vLLM's API key) fill what the inventory leaves unset
        yield on_site(with_stored(open_site(inventory, secrets)), reach)
