"""Bundle the Ansible content into the wheel: a `pip install deploykit` outside a checkout
finds its roles, playbooks, templates, modules and example inventory in deploy_kit/_content.
(An editable install reads them from the checkout instead.) Metadata lives in pyproject.toml.

Everything named here must exist: a wheel built from an sdist that lacked some of it (see
MANIFEST.in) fails its build instead of installing a deploykit with no roles.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

CONTENT = ("ansible.cfg", "playbooks", "templates", "inventory/example",
           # `verify --roundtrip` ships these to the serving hosts (deploy_kit.project.DRIVERS)
           "tools/lmcache_roundtrip.py", "tools/lmcache_nixl_roundtrip.py")
# ansible.cfg finds roles and modules as the deploykit.kvcache collection under collections/
# (a symlink in the checkout; a copy here, as wheels hold no links).
COLLECTION = ("galaxy.yml", "meta", "roles", "plugins", "playbooks", "README.md")
COLLECTION_DIR = "collections/ansible_collections/deploykit/kvcache"


class BuildWithContent(build_py):
    def run(self) -> None:
        super().run()
        target = Path(self.build_lib) / "deploy_kit" / "_content"
        shutil.rmtree(target, ignore_errors=True)
        for name in CONTENT:
            copy(Path(name), target / name)
        for name in COLLECTION:
            copy(Path(name), target / COLLECTION_DIR / name)


# never bundled: caches, and a site's own secrets should one sit in the example inventory
IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", ".molecule", "vault.yml")


def copy(source: Path, target: Path) -> None:
    if source.is_dir():
        shutil.copytree(source, target, ignore=IGNORE)
    elif source.is_file():
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)
    else:
        raise FileNotFoundError(
            f"deploykit build: {source} is missing from {Path.cwd()}; an sdist must carry it "
            "(MANIFEST.in)")


setup(cmdclass={"build_py": BuildWithContent})
