"""Options shared by several verbs, and the Ansible flags of up/down as one value."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

InventoryOpt = Annotated[str, typer.Option("--inventory", "-i",
                                           help="inventory name (inventory/<name>) or path")]
# Ansible's own variable, so CI that already sets it for ansible-playbook needs nothing else.
VaultOpt = Annotated[Path | None, typer.Option("--vault-password-file",
                                               envvar="ANSIBLE_VAULT_PASSWORD_FILE",
                                               help="decrypt group_vars vault files")]
LimitOpt = Annotated[str | None, typer.Option("--limit", "-l", help="Ansible host pattern")]
TagsOpt = Annotated[list[str] | None, typer.Option("--tags", "-t", help="only these tags")]
SkipOpt = Annotated[list[str] | None, typer.Option("--skip-tags", help="skip these tags")]
CheckOpt = Annotated[bool, typer.Option("--check", "-C", help="change nothing, report")]
DiffOpt = Annotated[bool, typer.Option("--diff", "-D", help="show file differences")]
ExtraOpt = Annotated[list[Path] | None, typer.Option("--extra-vars", "-e",
                                                     help="YAML/JSON vars file (@file)")]
PrintOpt = Annotated[bool, typer.Option("--print-command",
                                        help="print the ansible-playbook command and stop")]
VerboseOpt = Annotated[int, typer.Option("--verbose", "-v", count=True)]
ModelOpt = Annotated[str | None, typer.Option("--model", help="model string as served")]


@dataclass(frozen=True)
class AnsibleOptions:
    """The flags `up`/`down` hand to ansible-playbook (extra vars only as files)."""

    limit: str | None = None
    tags: tuple[str, ...] = ()
    skip_tags: tuple[str, ...] = ()
    check: bool = False
    diff: bool = False
    extra_vars: tuple[Path, ...] = ()
    print_command: bool = False
    verbose: int = 0

    @classmethod
    def of(cls, *, limit: str | None = None, tags: list[str] | None = None,
           skip_tags: list[str] | None = None, check: bool = False, diff: bool = False,
           extra_vars: list[Path] | None = None, print_command: bool = False,
           verbose: int = 0) -> AnsibleOptions:
        # typer hands list options over as None when absent; one name of an @-file form too
        files = tuple(Path(str(p).removeprefix("@")).resolve() for p in (extra_vars or []))
        return cls(limit, tuple(tags or ()), tuple(skip_tags or ()), check, diff, files,
                   print_command, verbose)
