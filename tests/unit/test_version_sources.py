"""pyproject.toml says deploykit's version once; galaxy.yml, __version__ and the
collection's meta/requirements.txt follow it (tools/version.py writes them), and the
execution environment spells no version and pins its base image."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from deploy_kit import __version__
from tests.conftest import REPO


def _tool(root: Path = REPO) -> ModuleType:
    spec = importlib.util.spec_from_file_location("version_tool", root / "tools" / "version.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_copy_agrees_with_pyproject() -> None:
    tool = _tool()
    assert tool.problems() == []
    assert __version__ == tool.version()
    assert yaml.safe_load((REPO / "galaxy.yml").read_text())["version"] == tool.version()


def test_set_version_writes_every_copy(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    for rel in ("pyproject.toml", "galaxy.yml", "deploy_kit/__init__.py",
                "meta/requirements.txt", "tools/version.py"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / rel, root / rel)
    tool = _tool(root)
    tool.set_version("1.2.3")
    assert tool.problems() == [] and tool.version() == "1.2.3"
    assert "deploykit==1.2.3\n" in (root / "meta" / "requirements.txt").read_text()
    assert 'version = "1.2.3"' in (root / "pyproject.toml").read_text()
    (root / "galaxy.yml").write_text((root / "galaxy.yml").read_text().replace(
        "version: 1.2.3", "version: 1.2.2"))
    assert tool.problems() == ["galaxy.yml: version 1.2.2, pyproject.toml says 1.2.3"]
    with pytest.raises(SystemExit):
        tool.set_version("latest")


def test_the_execution_environment_spells_no_version_and_pins_its_base() -> None:
    text = (REPO / "execution-environment.yml").read_text()
    ee = yaml.safe_load(text)
    assert _tool().version() not in text
    base = ee["images"]["base_image"]["name"]
    tag = base.rsplit(":", 1)[1] if "@" not in base else base.split("@")[1]
    assert tag not in ("latest", "9", "1") and any(c.isdigit() for c in tag), base


def test_the_collection_declares_its_requirements() -> None:
    meta = yaml.safe_load((REPO / "meta" / "execution-environment.yml").read_text())
    assert meta["dependencies"] == {"python": "meta/requirements.txt",
                                    "system": "meta/bindep.txt"}
    for rel in meta["dependencies"].values():
        assert (REPO / rel).is_file()
    galaxy = yaml.safe_load((REPO / "galaxy.yml").read_text())
    assert not any(p.startswith("meta") for p in galaxy["build_ignore"])
