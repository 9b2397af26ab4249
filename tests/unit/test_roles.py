"""Roles stay in step with the Python model: defaults, argument specs, and no drift."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from deploy_kit.config.models import HostConfig, PoolSpec
from tests.conftest import REPO

ROLES = sorted(p for p in (REPO / "roles").iterdir() if p.is_dir())


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_defaults_match_argument_specs(role: Path) -> None:
    defaults = yaml.safe_load((role / "defaults" / "main.yml").read_text()) or {}
    specs = yaml.safe_load((role / "meta" / "argument_specs.yml").read_text())
    options = specs["argument_specs"]["main"]["options"]
    assert set(defaults) == set(options), role.name
    for name in defaults:
        assert name.startswith(role.name + "_"), f"{name} lacks the {role.name}_ prefix"
        assert options[name].get("description"), f"{name} is undocumented"


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_role_defaults_equal_the_python_defaults(role: Path) -> None:
    defaults = yaml.safe_load((role / "defaults" / "main.yml").read_text()) or {}
    model = HostConfig()
    for name, value in defaults.items():
        if name not in HostConfig.model_fields:
            continue  # role-only knob (package lists, release checksums)
        python_value = getattr(model, name)
        if name == "ceph_rgw_pools_list":
            python_value = [p.model_dump(exclude_defaults=True) | {"name": p.name}
                            for p in python_value]
            value = [PoolSpec(**v).model_dump(exclude_defaults=True) | {"name": v["name"]}
                     for v in value]
        if python_value is None:
            python_value = ""
        assert value == python_value, f"{role.name}: {name} drifted from HostConfig"
