"""Currency: the example on a verified Ceph, ansible-core's bound, and a
newer Consul selectable with its licence stated and its archive pinned."""

from __future__ import annotations

import re
import tomllib
from typing import Any

import pytest

from deploy_kit.core import compat
from deploy_kit.core.errors import InventoryError, Problem
from deploy_kit.ops.site import open_site
from deploy_kit.plan.plan import build_plan
from tests.conftest import REPO, InventoryFactory

SHA = "a" * 64


def test_the_example_runs_a_verified_ceph_and_plan_does_not_warn_about_it() -> None:
    plan = build_plan(open_site(str(REPO / "inventory" / "example")))
    assert plan.site["ceph_version"] in compat._table()["ceph"]["verified"]
    assert not [w for w in plan.warnings if w.startswith("ceph ")]


def test_ansible_core_bound_allows_2_20_and_2_21() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    bound = next(d for d in project["dependencies"] if d.startswith("ansible-core"))
    upper = re.search(r"<\s*([\d.]+)", bound)
    assert upper and compat.parse_version(upper.group(1)) > (2, 21)
    ee = (REPO / "execution-environment.yml").read_text()
    assert bound in ee  # the AWX execution environment installs the same range


def _problems(make_inventory: InventoryFactory, **all_vars: Any) -> list[Problem]:
    try:
        open_site(str(make_inventory(all=all_vars)))
    except InventoryError as exc:
        return exc.problems
    return []


def test_the_default_consul_is_mpl_and_says_it_gets_no_fixes(
        make_inventory: InventoryFactory) -> None:
    site = open_site(str(make_inventory()))
    line = build_plan(site).site["consul"]
    assert site.settings.consul_version == "1.16.3"
    assert "MPL-2.0" in line and "no fixes since 2023-10-31" in line


@pytest.mark.parametrize(("version", "licence"), [
    ("1.16.1", "MPL-2.0"), ("1.17.0", "BUSL-1.1"), ("1.21.5", "BUSL-1.1"),
    ("1.22.0", "BUSL-1.1"), ("1.16.6", None)])
def test_licence_by_release(version: str, licence: str | None) -> None:
    found, sentence = compat.consul_licence(version)
    assert found == licence and version in sentence
    assert ("BUSL-1.1" in sentence) == (licence != "MPL-2.0")


def test_a_busl_consul_needs_its_archive_sha256(make_inventory: InventoryFactory) -> None:
    found = _problems(make_inventory, consul_version="1.21.5")
    assert [p.key for p in found] and {p.key for p in found} == {"consul_archive_sha256"}
    assert "1.21.5" in found[0].message and "SHA256SUMS" in found[0].fix
    pinned = make_inventory(all={"consul_version": "1.21.5", "consul_archive_sha256": SHA})
    plan = build_plan(open_site(str(pinned)))
    assert plan.site["consul"].startswith("Consul 1.21.5 is BUSL-1.1")
    two = _problems(make_inventory, consul_version="2.0.1", consul_archive_sha256=SHA)
    assert {p.key for p in two} == {"consul_version"}
