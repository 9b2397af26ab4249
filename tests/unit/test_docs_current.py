"""The documents follow the tree: docs/architecture.md names every package of deploy_kit/,
docs/operating.md every verb and verb group of the CLI, and no file names a tracker
number in place of what it means."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from tests.conftest import REPO

DOCS = REPO / "docs"
PACKAGE = REPO / "deploy_kit"
# a tracker number where a reason belongs ("issue", an optional "#", digits)
TRACKER_NUMBER = re.compile(r"issue #?[0-9]+", re.IGNORECASE)
SCANNED = ("deploy_kit", "roles", "plugins", "templates", "deploykit-lab", "tests", "docs",
           "bench", "tools", "playbooks", "README.md")
SKIPPED_DIRS = {".venv", ".git", "__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache",
                "build", "dist", "node_modules"}


def subpackages() -> list[str]:
    """Every package under deploy_kit/ as `name/` (nested: `verify/checks/`)."""
    return sorted(str(init.parent.relative_to(PACKAGE)) + "/"
                  for init in PACKAGE.rglob("__init__.py") if init.parent != PACKAGE)


def test_architecture_names_every_package() -> None:
    text = (DOCS / "architecture.md").read_text()
    packages = subpackages()
    assert "config/" in packages and "render/" in packages
    missing = [p for p in packages if f"`{p}`" not in text and f"`{p[:-1]}/…`" not in text]
    assert not missing, f"docs/architecture.md does not describe {missing}"


def cli_verbs() -> list[str]:
    """The top-level verbs and verb groups of `deploykit` (plugins' included)."""
    import typer.main

    from deploy_kit.cli.app import app

    command = typer.main.get_command(app)
    names = list(getattr(command, "commands", {}))
    assert "up" in names and "secrets" in names
    return sorted(names)


def test_operating_lists_every_verb() -> None:
    text = (DOCS / "operating.md").read_text()
    missing = [v for v in cli_verbs() if not re.search(rf"^deploykit {v}\b", text, re.M)]
    assert not missing, f"docs/operating.md's command list lacks {missing}"


def _scanned_files() -> Iterator[Path]:
    for name in SCANNED:
        root = REPO / name
        if root.is_file():
            yield root
            continue
        for path in root.rglob("*"):
            rel = path.relative_to(REPO).parts
            if path.is_file() and not SKIPPED_DIRS & set(rel) and \
                    not any(p.endswith(".egg-info") for p in rel):
                yield path


def test_no_tracker_numbers() -> None:
    found = []
    for path in _scanned_files():
        try:
            text = path.read_text()
        except (UnicodeDecodeError, OSError):
            continue  # a binary file
        for number, line in enumerate(text.splitlines(), 1):
            if TRACKER_NUMBER.search(line):
                found.append(f"{path.relative_to(REPO)}:{number}: {line.strip()[:80]}")
    assert not found, "say what it means instead of citing a tracker number:\n" + \
        "\n".join(found)
