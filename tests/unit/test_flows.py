"""deploy_kit/flows: the runs below the CLI take plain values and raise the project's own
errors, never Typer's or Click's (the CLI maps them)."""

from __future__ import annotations

import ast

import pytest

from deploy_kit.core.errors import BadInput
from deploy_kit.flows.converge import check_limit, refuse_bad_input
from deploy_kit.flows.request import AnsibleOptions
from deploy_kit.ops.site import open_site
from tests.conftest import REPO, InventoryFactory


def test_no_flow_imports_the_command_line() -> None:
    for path in sorted((REPO / "deploy_kit" / "flows").glob("*.py")):
        tree = ast.parse(path.read_text())
        imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import)
                    for a in n.names}
        imported |= {(n.module or "").split(".")[0] for n in ast.walk(tree)
                     if isinstance(n, ast.ImportFrom)}
        assert not imported & {"typer", "click"}, path.name
        assert "deploy_kit.cli" not in path.read_text(), path.name


def test_bad_input_names_the_option(make_inventory: InventoryFactory) -> None:
    site = open_site(str(make_inventory()))
    with pytest.raises(BadInput, match="matches no host") as limit:
        check_limit(site, "no-such-host")
    assert limit.value.param_hint == "--limit" and limit.value.exit_code == 2
    with pytest.raises(BadInput, match="no task is tagged nope") as tags:
        refuse_bad_input(site, AnsibleOptions(tags=("nope",)))
    assert tags.value.param_hint == "--tags"
