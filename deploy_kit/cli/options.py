"""Options shared by several verbs, and the Ansible flags of up/down as one value."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from deploy_kit.config.vault import VaultIdentity, VaultSecrets

# several -i form one inventory, as for ansible-playbook
InventoryOpt = Annotated[list[str], typer.Option(
    "--inventory", "-i", metavar="SITE",
    help="inventory name (inventory/<name>) or path; repeat to merge several sources into "
         "one inventory, as Ansible does")]
# Vault flags as ansible-playbook has them (its variables ANSIBLE_VAULT_IDENTITY_LIST and
# ANSIBLE_VAULT_PASSWORD_FILE are read too: deploy_kit/config/vault.py)
VaultIdOpt = Annotated[list[str] | None, typer.Option(
    "--vault-id", metavar="ID",
    help="vault identity LABEL@FILE, FILE or LABEL@prompt (repeatable; FILE may be a password "
         "script)")]
VaultPasswordFileOpt = Annotated[list[Path] | None, typer.Option(
    "--vault-password-file", "--vault-pass-file", metavar="FILE",
    help="vault password file or script, id `default` (repeatable)")]
AskVaultOpt = Annotated[bool, typer.Option("--ask-vault-pass", "--ask-vault-password", "-J",
                                           help="ask for the vault password (once per run)")]
LimitOpt = Annotated[str | None, typer.Option("--limit", "-l", metavar="PATTERN",
                                                     help="Ansible host pattern")]
TagsOpt = Annotated[list[str] | None, typer.Option("--tags", "-t", metavar="TAG",
                                                        help="only these tags (TAG,TAG or "
                                                             "repeated)")]
SkipOpt = Annotated[list[str] | None, typer.Option("--skip-tags", metavar="TAG",
                                                        help="skip these tags")]
CheckOpt = Annotated[bool, typer.Option("--check", "-C", help="change nothing, report")]
DiffOpt = Annotated[bool, typer.Option("--diff", "-D", help="show file differences")]
ExtraOpt = Annotated[list[str] | None, typer.Option(
    "--extra-vars", "-e", metavar="VARS",
    help="as ansible-playbook: key=value pairs, a YAML/JSON mapping, or @file; deploykit "
         "settings are refused (set them in the inventory)")]
BecomeOpt = Annotated[bool, typer.Option("--become", "-b",
                                         help="run tasks with become (sudo) on every host")]
ForksOpt = Annotated[int | None, typer.Option("--forks", "-f", min=1, metavar="N",
                                              help="hosts Ansible works on at once")]
PrintOpt = Annotated[bool, typer.Option("--print-command",
                                        help="print the ansible-playbook command and stop")]
VerboseOpt = Annotated[int, typer.Option("--verbose", "-v", count=True, show_default=False,
                                         help="show Ansible's own output (-vvv: more)")]
ModelOpt = Annotated[str | None, typer.Option("--model", metavar="MODEL",
                                              help="model string as served")]


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


# Reaching hosts, as ansible-playbook spells it (every verb that contacts a host)
AskBecomeOpt = Annotated[bool, typer.Option(
    "--ask-become-pass", "-K", help="ask once for the become (sudo) password")]
BecomeUserOpt = Annotated[str | None, typer.Option(
    "--become-user", help="become this user (Ansible's default: root)")]
UserOpt = Annotated[str | None, typer.Option(
    "--user", "-u", help="connect as this user (Ansible's remote_user)")]
PrivateKeyOpt = Annotated[Path | None, typer.Option(
    "--private-key", "--key-file", help="the SSH private key to connect with")]
ListHostsOpt = Annotated[bool, typer.Option(
    "--list-hosts", help="print the hosts each play would reach (Ansible's output) and stop")]
ListTasksOpt = Annotated[bool, typer.Option(
    "--list-tasks", help="print the tasks each play would run (Ansible's output) and stop")]


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
