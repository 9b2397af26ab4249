"""The typer options shared by several verbs (their values: deploy_kit.flows.request)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

# several -i form one inventory, as for ansible-playbook
InventoryOpt = Annotated[list[str], typer.Option(
    "--inventory", "-i", metavar="SITE",
    help="inventory name (inventory/<name>) or path; repeat to merge several sources into "
         "one inventory, as Ansible does")]
# Vault flags as ansible-playbook has them (its variables ANSIBLE_VAULT_IDENTITY_LIST and
# ANSIBLE_VAULT_PASSWORD_FILE, and ansible.cfg's vault settings, are read too:
# deploy_kit/config/vault.py)
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
WaitLockOpt = Annotated[float, typer.Option(
    "--wait-lock", min=0, metavar="SECONDS",
    help="if another run holds this site's lock, wait up to SECONDS for it instead of "
         "stopping at once (exit 7, naming the holder)")]
