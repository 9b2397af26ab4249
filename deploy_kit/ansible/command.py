"""A run request and the ansible-playbook argv it means (pure; shown by --print-command)."""

from __future__ import annotations

import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class RunRequest:
    verb: str
    playbook: Path
    inventory: Path
    limit: str | None = None
    tags: tuple[str, ...] = ()
    skip_tags: tuple[str, ...] = ()
    check: bool = False
    diff: bool = False
    extra_vars_files: tuple[Path, ...] = ()
    extra_vars_inline: tuple[str, ...] = ()  # after the files: an inline value wins
    become: bool = False
    vault_args: tuple[str, ...] = ()  # --vault-id LABEL@FILE… (paths only, never a secret)
    verbosity: int = 0
    forks: int | None = None
    extra: tuple[str, ...] = field(default_factory=tuple)
    more_inventories: tuple[Path, ...] = ()  # every further -i, merged by Ansible
    connection: tuple[str, ...] = ()  # -u, --private-key, --become-user, ... (ConnectionOptions)
    listing: tuple[str, ...] = ()  # --list-hosts / --list-tasks: Ansible prints, runs nothing


def options(request: RunRequest) -> list[str]:
    """Everything after the playbook, in ansible-playbook's own words."""
    argv: list[str] = []
    if request.limit:
        argv += ["--limit", request.limit]
    if request.tags:
        argv += ["--tags", ",".join(request.tags)]
    if request.skip_tags:
        argv += ["--skip-tags", ",".join(request.skip_tags)]
    if request.check:
        argv.append("--check")
    if request.diff:
        argv.append("--diff")
    for path in request.extra_vars_files:
        argv += ["-e", f"@{path}"]
    for text in request.extra_vars_inline:
        argv += ["-e", text]
    if request.become:
        argv.append("--become")
    argv += request.vault_args
    if request.forks:
        argv += ["--forks", str(request.forks)]
    argv += list(request.connection)
    argv += list(request.listing)
    if request.verbosity:
        argv.append("-" + "v" * min(request.verbosity, 4))
    return argv + list(request.extra)


def inventories(request: RunRequest) -> list[Path]:
    return [request.inventory, *request.more_inventories]


def playbook_argv(request: RunRequest) -> list[str]:
    sources = [word for path in inventories(request) for word in ("-i", str(path))]
    return ["ansible-playbook", *sources, str(request.playbook), *options(request)]


def printable(request: RunRequest, env: dict[str, str] | None = None) -> str:
    """The command as a shell line, with the variables it needs in front of it."""
    prefix = [f"{k}={shlex.quote(v)}" for k, v in (env or {}).items()]
    argv = playbook_argv(request)
    beside = Path(sys.executable).parent / argv[0]  # this install's Ansible, from anywhere
    if beside.is_file():
        argv[0] = str(beside)
    return " ".join([*prefix, shlex.join(argv)])
