"""Locate the project's content (templates, playbooks, roles, inventories)."""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path


@cache
def project_dir() -> Path:
    """DEPLOYKIT_PROJECT_DIR, else the checkout this package was imported from."""
    env = os.environ.get("DEPLOYKIT_PROJECT_DIR")
    if env:
        return Path(env).resolve()
    return Path(__file__).resolve().parent.parent


def templates_dir() -> Path:
    return project_dir() / "templates"
