"""The tags deploykit's playbooks and roles carry, read from their YAML (pure, no Ansible
run): `--tags`/`--skip-tags` naming none of them would select nothing, silently."""

from __future__ import annotations

from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from deploy_kit.core import trusted_yaml
from deploy_kit.project import collection_dir

# tags Ansible itself gives a meaning to
SPECIAL = frozenset({"all", "always", "never", "tagged", "untagged"})


def _tags_in(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "tags" and isinstance(value, str | list):
                for tag in [value] if isinstance(value, str) else value:
                    for part in str(tag).split(","):
                        if part.strip() and "{{" not in part:
                            yield part.strip()
            else:
                yield from _tags_in(value)
    elif isinstance(node, list):
        for item in node:
            yield from _tags_in(item)


@cache
def known_tags(project: Path) -> frozenset[str]:
    found: set[str] = set()
    # a wheel keeps its roles in the collection copy, not beside the playbooks
    for folder in (project / "playbooks", collection_dir(project) / "roles"):
        for path in sorted(folder.rglob("*.yml")):
            if "molecule" in path.parts or "templates" in path.parts:
                continue
            try:
                found.update(_tags_in(trusted_yaml.load(path.read_text())))
            except yaml.YAMLError:
                continue  # not ours to judge here: ansible-lint is
    return frozenset(found)


def unknown_tags(requested: tuple[str, ...], project: Path) -> list[str]:
    if not requested:  # nothing to judge: no need to read every role
        return []
    known = known_tags(project) | SPECIAL
    return sorted(t for t in requested if t not in known)
