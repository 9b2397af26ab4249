"""What a host's converge record digests beyond the rendered tree: deploykit's own roles,
playbooks and plugins, and the names of every role input (the argument specs' options).
Computed once per render and written to the site-wide tree, so the inputs lookup
(plugins/lookup/deploykit_inputs.py) walks no code and parses no spec per host."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import yaml

INPUTS_PATH = "/.deploykit/inputs.json"
CODE = ("roles", "playbooks", "plugins")
# Options that steer one run, not what a host ends up with (the render directory is new on
# every run; --full and --restart-serving bypass the records anyway).
RUN_SCOPED = frozenset({"deploykit_render_dir", "deploykit_full", "deploykit_restart_serving",
                        "vllm_serial"})


def tree_digest(root: Path, digest: Any) -> None:
    """Every file under root, path and content, in a stable order (missing: nothing)."""
    for top, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            path = Path(top) / name
            digest.update(str(path.relative_to(root)).encode() + b"\0")
            digest.update(hashlib.sha256(path.read_bytes()).digest())


def role_options(project: Path) -> list[str]:
    """Every option name of every entry point of every role's argument spec: the inputs
    the roles read beyond the rendered tree (tests/unit/test_roles.py keeps it so)."""
    names: set[str] = set()
    for spec in sorted(project.glob("roles/*/meta/argument_specs.yml")):
        entries = (yaml.safe_load(spec.read_text()) or {}).get("argument_specs", {})
        for entry in entries.values():
            names.update((entry or {}).get("options", {}) or {})
    return sorted(names - RUN_SCOPED)


def code_inputs(project: Path) -> dict[str, Any]:
    digest = hashlib.sha256()
    for part in CODE:
        digest.update(f"\0code {part}\0".encode())
        tree_digest(project / part, digest)
    return {"code_digest": digest.hexdigest(), "role_options": role_options(project)}
