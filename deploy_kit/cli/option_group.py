"""The vault, connection and playbook flags, declared once for every verb that takes them
(kolla-ansible's mixin, pip's make_option_group).

A verb declares only its own options, plus a parameter for each value it wants:
`vault: VaultOptions`, `connection: ConnectionOptions`, `ansible: AnsibleOptions` (the
flags of a playbook run) or `listing: tuple[str, ...]` (--list-hosts/--list-tasks).
`@option_group(LAYOUT)` puts the shared options into the verb's signature, where its
--help lists them, and hands the verb those values. A usage error a flow raises
(core.errors.BadInput) becomes Click's own usage error of the option it names.
"""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable, Sequence
from typing import Any, Final

import typer

from deploy_kit.cli.options import (
    AskBecomeOpt,
    AskVaultOpt,
    BecomeOpt,
    BecomeUserOpt,
    CheckOpt,
    DiffOpt,
    ExtraOpt,
    ForksOpt,
    LimitOpt,
    ListHostsOpt,
    ListTasksOpt,
    PrintOpt,
    PrivateKeyOpt,
    SkipOpt,
    TagsOpt,
    UserOpt,
    VaultIdOpt,
    VaultPasswordFileOpt,
    VerboseOpt,
)
from deploy_kit.core.errors import BadInput
from deploy_kit.flows.request import AnsibleOptions, ConnectionOptions, VaultOptions

# every shared option: its name in a signature, its typer declaration and default
SHARED: Final[dict[str, tuple[Any, Any]]] = {
    "vault_id": (VaultIdOpt, None),
    "vault_password_file": (VaultPasswordFileOpt, None),
    "ask_vault_pass": (AskVaultOpt, False),
    "limit": (LimitOpt, None),
    "tags": (TagsOpt, None),
    "skip_tags": (SkipOpt, None),
    "check": (CheckOpt, False),
    "diff": (DiffOpt, False),
    "extra_vars": (ExtraOpt, None),
    "print_command": (PrintOpt, False),
    "verbose": (VerboseOpt, 0),
    "become": (BecomeOpt, False),
    "ask_become_pass": (AskBecomeOpt, False),
    "become_user": (BecomeUserOpt, None),
    "user": (UserOpt, None),
    "private_key": (PrivateKeyOpt, None),
    "forks": (ForksOpt, None),
    "list_hosts": (ListHostsOpt, False),
    "list_tasks": (ListTasksOpt, False),
}
VAULT = ("vault_id", "vault_password_file", "ask_vault_pass")
CONNECTION = ("become", "ask_become_pass", "become_user", "user", "private_key", "forks")
PLAYBOOK = ("limit", "tags", "skip_tags", "check", "diff", "extra_vars", "print_command",
            "verbose")
LISTING = ("list_hosts", "list_tasks")

# Where the verb's own options (after its anchor, `inventory` unless told) go in a layout.
OWN: Final = "<own>"
# The orders --help shows today, one per family of verbs:
# verify, doctor, status: the vault flags after -i, the connection flags last
READER = (*VAULT, OWN, *CONNECTION)
# cache, bench, plan, render, validate, wheelhouse, secrets list/generate: all last
TRAILING = (OWN, *VAULT, *CONNECTION)
# up, down, remove: ansible-playbook's flags in the order they grew
PLAYBOOK_RUN = ("vault_id", "vault_password_file", *PLAYBOOK, "become", "forks",
                "ask_vault_pass", "ask_become_pass", "become_user", "user", "private_key",
                *LISTING, OWN)
# secrets rotate: -J beside the other vault flags
ROTATE = (*VAULT, *PLAYBOOK, "become", "forks", "ask_become_pass", "become_user", "user",
          "private_key", OWN)

VALUES = {"vault": VAULT, "connection": CONNECTION, "ansible": PLAYBOOK, "listing": LISTING}


def option_group(layout: Sequence[str], *, after: str = "inventory",
                 without: Sequence[str] = ()) -> Callable[[Callable[..., None]],
                                                          Callable[..., None]]:
    """The verb with the shared options it asks for (by its value parameters), placed as
    `layout` says right after its parameter `after`; `without`: shared options the verb
    does not take (`down` has no --tags)."""
    def decorate(verb: Callable[..., None]) -> Callable[..., None]:
        hints = typing.get_type_hints(verb, include_extras=True)
        own = [p.replace(annotation=hints.get(p.name, p.annotation))
               for p in inspect.signature(verb).parameters.values()]
        wanted = [v for v in VALUES if v in {p.name for p in own}]
        taken = {n for v in wanted for n in VALUES[v]} - set(without)
        if "ansible" in wanted:  # a playbook run's --become and --forks
            taken |= {"become", "forks"}
        clash = taken & {p.name for p in own}
        if clash or taken - set(layout):  # a programming error: fail at import, not at use
            raise TypeError(f"{verb.__name__}: own options {sorted(clash)} clash with the "
                            f"group's; not in the layout: {sorted(taken - set(layout))}")
        kept = [p for p in own if p.name not in VALUES]
        at = [p.name for p in kept].index(after) + 1
        head, tail = kept[:at], kept[at:]
        placed: list[inspect.Parameter] = [*head]
        for name in layout:
            if name == OWN:
                placed += tail
            elif name in taken:
                placed.append(_parameter(name))
        if OWN not in layout:
            placed += tail

        @functools.wraps(verb)
        def command(**given: Any) -> None:
            shared_given = {n: given.pop(n) for n in taken}  # verify's own --check stays
            values = _values(wanted, shared_given)
            try:
                verb(**given, **values)
            except BadInput as exc:  # inside Click's context: its usage line and hint
                raise typer.BadParameter(exc.message, param_hint=exc.param_hint) from None

        command.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
            _keyword_order(placed), return_annotation=None)
        command.__annotations__ = {p.name: p.annotation for p in placed}
        return command
    return decorate


def _parameter(name: str) -> inspect.Parameter:
    annotation, default = SHARED[name]
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=annotation,
                             default=default)


def _keyword_order(params: list[inspect.Parameter]) -> list[inspect.Parameter]:
    """Every parameter keyword-only (Click passes them by name), in the order given."""
    return [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in params]


def _values(wanted: list[str], shared: dict[str, Any]) -> dict[str, Any]:
    """The values the verb asked for, made from the shared options it was given."""
    values: dict[str, Any] = {}
    if "vault" in wanted:
        values["vault"] = VaultOptions.of(shared.get("vault_id"),
                                          shared.get("vault_password_file"),
                                          shared.get("ask_vault_pass", False))
    if "ansible" in wanted:
        values["ansible"] = AnsibleOptions.of(**{n: shared[n] for n in (
            *PLAYBOOK, "become", "forks") if n in shared})
    if "connection" in wanted:
        # a playbook run takes --become/--forks once, from its Ansible flags
        playbook = "ansible" in wanted
        values["connection"] = ConnectionOptions(
            become=False if playbook else shared.get("become", False),
            ask_become_pass=shared.get("ask_become_pass", False),
            become_user=shared.get("become_user"), user=shared.get("user"),
            private_key=shared.get("private_key"),
            forks=None if playbook else shared.get("forks"))
    if "listing" in wanted:
        values["listing"] = tuple(flag for flag, on in (
            ("--list-hosts", shared.get("list_hosts", False)),
            ("--list-tasks", shared.get("list_tasks", False))) if on)
    return values

