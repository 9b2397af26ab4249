"""Locate the project's content (templates, playbooks, roles, inventories) and run records."""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
CHECKOUT = PACKAGE.parent
BUNDLED = PACKAGE / "_content"  # what a wheel carries (see setup.py)
# where a wheel keeps roles, modules and plugins: a copy of the deploykit.kvcache collection
# (in a checkout the same path is a link to the checkout itself)
COLLECTION = Path("collections", "ansible_collections", "deploykit", "kvcache")
# `verify --roundtrip` ships one of these to each serving host (by lmcache_mode)
DRIVERS = {"s3": Path("tools", "lmcache_roundtrip.py"),
           "nixl": Path("tools", "lmcache_nixl_roundtrip.py")}


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


def inventories_dir() -> Path:
    """Where `--inventory NAME` looks first and `deploykit lab up` writes inventory/lab: the
    checkout's inventory/, or ./inventory where deploykit is installed as a wheel (as ./runs;
    never inside site-packages)."""
    return project_dir() / "inventory" if project_dir() != BUNDLED else Path.cwd() / "inventory"


def templates_dir() -> Path:
    return project_dir() / "templates"


def collection_dir(project: Path) -> Path:
    """What holds roles/ and plugins/: a checkout itself, or the collection copy inside a
    wheel's content (which has no top-level roles/)."""
    return project if (project / "roles").is_dir() else project / COLLECTION


def roles_dir() -> Path:
    """The roles: the checkout's roles/, or the collection copy a wheel carries."""
    return collection_dir(project_dir()) / "roles"


def driver_path(mode: str) -> Path:
    """The round-trip driver for an lmcache_mode: the checkout's tools/, or the wheel's copy."""
    return project_dir() / DRIVERS[mode]
