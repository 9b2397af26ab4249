"""Locate the project's content (templates, playbooks, roles, inventories) and run records."""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
CHECKOUT = PACKAGE.parent
BUNDLED = PACKAGE / "_content"  # what a wheel carries (see setup.py)


def is_checkout() -> bool:
    return (CHECKOUT / "playbooks" / "site.yml").is_file()


@cache
def project_dir() -> Path:
    """DEPLOYKIT_PROJECT_DIR, else the checkout this package was imported from, else the
    content bundled in the installed wheel."""
    env = os.environ.get("DEPLOYKIT_PROJECT_DIR")
    if env:
        return Path(env).resolve()
    if is_checkout() or not BUNDLED.is_dir():
        return CHECKOUT
    return BUNDLED


def runs_root() -> Path:
    """Run records: the checkout's runs/, or ./runs where deploykit is installed as a wheel
    (never inside site-packages)."""
    env = os.environ.get("DEPLOYKIT_RUNS_DIR")
    if env:
        return Path(env).resolve()
    return project_dir() / "runs" if project_dir() != BUNDLED else Path.cwd() / "runs"


def templates_dir() -> Path:
    return project_dir() / "templates"


def roles_dir() -> Path:
    """The roles: the checkout's roles/, or the collection copy a wheel carries."""
    if project_dir() == BUNDLED:
        return BUNDLED / "collections" / "ansible_collections" / "deploykit" / "kvcache" / "roles"
    return project_dir() / "roles"
