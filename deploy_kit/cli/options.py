"""Options shared by several verbs, and the Ansible flags of up/down as one value."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

InventoryOpt = Annotated[str, typer.Option("--inventory", "-i", metavar="SITE",
                                           help="inventory name (inventory/<name>) or path")]
# Ansible's own variable, so CI that already sets it for ansible-playbook needs nothing else.
VaultOpt = Annotated[Path | None, typer.Option("--vault-password-file", metavar="FILE",
                                               envvar="ANSIBLE_VAULT_PASSWORD_FILE",
                                               help="decrypt group_vars vault files")]
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
AskVaultOpt = Annotated[bool, typer.Option("--ask-vault-pass", "-J",
                                           help="ask for the vault password")]
PrintOpt = Annotated[bool, typer.Option("--print-command",
                                        help="print the ansible-playbook command and stop")]
VerboseOpt = Annotated[int, typer.Option("--verbose", "-v", count=True, show_default=False,
                                         help="show Ansible's own output (-vvv: more)")]
ModelOpt = Annotated[str | None, typer.Option("--model", metavar="MODEL",
                                              help="model string as served")]


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
