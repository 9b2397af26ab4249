"""The documentation cannot drift: docs/settings.md is what tools/settings_reference.py writes,
the README stays a short reference, and every relative link leads to a file that exists."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

from tests.conftest import REPO

README = REPO / "README.md"
DOCS = REPO / "docs"
README_MAX_LINES = 150
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "settings_reference", REPO / "tools" / "settings_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while it loads
    spec.loader.exec_module(module)
    return module


def test_settings_reference_is_generated() -> None:
    expected = _generator().render()
    current = (DOCS / "settings.md").read_text()
    assert current == expected, "docs/settings.md is stale: run `make docs`"


def test_settings_reference_lists_every_setting_and_role() -> None:
    from deploy_kit.config.models import HostConfig

    text = (DOCS / "settings.md").read_text()
    missing = [name for name in HostConfig.model_fields if f"| `{name}` |" not in text]
    assert not missing
    for spec in sorted((REPO / "roles").glob("*/meta/argument_specs.yml")):
        assert f"### {spec.parent.parent.name}: " in text


def test_readme_is_a_short_reference() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, (
        f"README.md has {len(lines)} lines; keep it at most {README_MAX_LINES} and move "
        "detail into docs/")
    text = "\n".join(lines)
    assert "make lab" in text and "make test" in text


def _relative_links(path: Path) -> list[str]:
    text = _FENCE.sub("", path.read_text())
    links = []
    for target in _LINK.findall(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue
        links.append(target.split("#", 1)[0])
    return links


def test_relative_links_point_to_existing_files() -> None:
    documents = [README, *sorted(DOCS.glob("*.md"))]
    assert len(documents) > 1
    broken = [f"{doc.relative_to(REPO)} -> {link}" for doc in documents
              for link in _relative_links(doc)
              if not (doc.parent / link).resolve().exists()]
    assert not broken, broken
