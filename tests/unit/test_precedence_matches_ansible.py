"""deploykit's own YAML reader ranks variables as Ansible does, so what `validate` checks is
what ansible-playbook applies: a value deploykit reads from one file while Ansible applies
another would pass every rule and then reach the hosts unchecked. Ansible's own
VariableManager (load_with_ansible) is the oracle."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from deploy_kit.config.ansible_inventory import load_with_ansible
from deploy_kit.config.load import load_inventory
from deploy_kit.config.vault import VaultSecrets
from tests.conftest import REPO


def _both(root: Path) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    mine = load_inventory(root, VaultSecrets(), collect=True)
    theirs = load_with_ansible([root], VaultSecrets())
    assert not mine.problems and not theirs.problems, (mine.problems, theirs.problems)
    return ({h: r.vars for h, r in mine.hosts.items()},
            {h: r.vars for h, r in theirs.hosts.items()})


def _write(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data))


def test_every_layer_ranks_as_ansible_ranks_it(tmp_path: Path) -> None:
    # each key is set in several layers; the one Ansible applies must be deploykit's too
    _write(tmp_path / "hosts.yml", {"all": {
        "vars": {"a": "inline-all", "b": "inline-all"},
        "children": {"parent": {
            "vars": {"c": "inline-parent"},
            "children": {"child": {
                "vars": {"a": "inline-child", "b": "inline-child", "c": "inline-child",
                         "d": "inline-child"},
                "hosts": {"h1": {"e": "inline-host", "f": "inline-host"},
                          "h2": None}}}}}}})
    _write(tmp_path / "group_vars" / "all.yml", {"b": "file-all"})
    _write(tmp_path / "group_vars" / "parent.yml", {"c": "file-parent", "d": "file-parent"})
    _write(tmp_path / "group_vars" / "child" / "main.yml", {"e": "file-child"})
    _write(tmp_path / "host_vars" / "h1.yml", {"f": "file-host"})
    mine, theirs = _both(tmp_path)
    assert mine == theirs
    # the ranks that matter, spelled out (a wrong oracle would not pass these)
    assert mine["h1"] == {"a": "inline-child", "b": "file-all", "c": "file-parent",
                          "d": "file-parent", "e": "inline-host", "f": "file-host"}


@pytest.mark.parametrize("inventory", ["example"])
def test_the_shipped_inventories_read_the_same_as_ansible(inventory: str) -> None:
    mine, theirs = _both(REPO / "inventory" / inventory)
    assert mine.keys() == theirs.keys()
    for host, values in mine.items():
        assert {k: v for k, v in theirs[host].items() if k in values} == values, host
