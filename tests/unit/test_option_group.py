"""cli/option_group.py: the vault, connection and playbook flags are declared once, placed
where each verb's --help has them, and handed to the verb as the flows' request values."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from deploy_kit.cli.option_group import PLAYBOOK_RUN, READER, TRAILING, option_group
from deploy_kit.cli.options import InventoryOpt
from deploy_kit.core.errors import BadInput
from deploy_kit.flows.request import AnsibleOptions, ConnectionOptions, VaultOptions
from tests.conftest import REPO

SHARED_ALIASES = {"VaultIdOpt", "VaultPasswordFileOpt", "AskVaultOpt", "BecomeOpt",
                  "AskBecomeOpt", "BecomeUserOpt", "UserOpt", "PrivateKeyOpt", "ForksOpt",
                  "ListHostsOpt", "ListTasksOpt"}


def test_the_shared_options_are_declared_in_the_group_only() -> None:
    for path in sorted((REPO / "deploy_kit" / "cli").glob("*.py")):
        if path.name in ("options.py", "option_group.py"):
            continue
        names = {a.name for node in ast.walk(ast.parse(path.read_text()))
                 if isinstance(node, ast.ImportFrom) for a in node.names}
        assert not names & SHARED_ALIASES, path.name
        text = path.read_text()
        assert "VaultOptions.of(" not in text and "ConnectionOptions(become" not in text, \
            path.name


def _app(verb: Any) -> typer.Typer:
    app = typer.Typer()
    app.command()(verb)
    app.command("other")(lambda: None)  # two commands: the verb is a subcommand
    return app


def test_a_verb_gets_the_values_and_keeps_its_own_options() -> None:
    seen: dict[str, Any] = {}

    @option_group(READER)
    def look(inventory: InventoryOpt, vault: VaultOptions, connection: ConnectionOptions,
             check: list[str] | None = None) -> None:
        seen.update(inventory=inventory, vault=vault, connection=connection, check=check)

    result = CliRunner().invoke(_app(look), [
        "look", "-i", "a", "--vault-id", "x@y", "-J", "--check", "id1", "-b", "-u", "ops",
        "-f", "3", "--private-key", "k"])
    assert result.exit_code == 0, result.output
    assert seen["inventory"] == ["a"] and seen["check"] == ["id1"]
    assert seen["vault"] == VaultOptions(("x@y",), (), True)
    assert seen["connection"] == ConnectionOptions(become=True, user="ops", forks=3,
                                                   private_key=Path("k"))


def test_a_playbook_verb_takes_become_and_forks_as_run_flags() -> None:
    seen: dict[str, Any] = {}

    @option_group(PLAYBOOK_RUN, without=("tags", "skip_tags", "diff"))
    def run(inventory: InventoryOpt, vault: VaultOptions, ansible: AnsibleOptions,
            connection: ConnectionOptions, listing: tuple[str, ...]) -> None:
        seen.update(ansible=ansible, connection=connection, listing=listing)

    result = CliRunner().invoke(_app(run), ["run", "-i", "a", "-b", "-f", "2", "-l", "h1",
                                            "--list-hosts", "-K"])
    assert result.exit_code == 0, result.output
    assert seen["ansible"] == AnsibleOptions(limit="h1", become=True, forks=2)
    assert seen["connection"] == ConnectionOptions(ask_become_pass=True)
    assert seen["listing"] == ("--list-hosts",)
    assert CliRunner().invoke(_app(run), ["run", "-i", "a", "--tags", "x"]).exit_code == 2


def test_help_lists_the_options_in_the_layout_order() -> None:
    @option_group(TRAILING)
    def show(inventory: InventoryOpt, vault: VaultOptions,
             as_json: bool = typer.Option(False, "--json")) -> None:
        """Show."""

    command = typer.main.get_command(_app(show)).commands["show"]  # type: ignore[attr-defined]
    assert [p.name for p in command.params] == [
        "inventory", "as_json", "vault_id", "vault_password_file", "ask_vault_pass"]


def test_a_flows_bad_input_is_the_usage_error_of_its_option() -> None:
    @option_group(TRAILING)
    def fail(inventory: InventoryOpt, vault: VaultOptions) -> None:
        raise BadInput("names nothing", param_hint="--limit")

    result = CliRunner().invoke(_app(fail), ["fail", "-i", "a"])
    assert result.exit_code == 2
    assert "Invalid value for --limit: names nothing" in result.output


def test_an_own_option_that_clashes_with_the_group_is_refused_at_import() -> None:
    with pytest.raises(TypeError, match="clash"):
        @option_group(PLAYBOOK_RUN)
        def clash(inventory: InventoryOpt, ansible: AnsibleOptions,
                  check: bool = False) -> None: ...
