"""The digest of everything a run applies to one host, computed on the controller."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import yaml
from ansible.errors import AnsibleError
from ansible.plugins.lookup import LookupBase

DOCUMENTATION = r"""
name: deploykit_inputs
short_description: Digest of the inputs a run applies to the current host
description: >-
  sha256 over the host's rendered tree and the site-wide one (settings, every non-secret
  file), the value on this host of every option a deploykit role's argument spec names
  (secrets included: only their digest leaves this function), and deploykit's own roles,
  playbooks and plugins. Two runs with the same digest apply the same things to the host.
options:
  _terms: {description: unused, required: false}
"""

COLLECTION = Path(__file__).resolve().parents[2]
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


def role_options(collection: Path) -> list[str]:
    """Every option name of every entry point of every role's argument spec: the inputs
    the roles read beyond the rendered tree (tests/unit/test_converged.py keeps it so)."""
    names: set[str] = set()
    for spec in sorted(collection.glob("roles/*/meta/argument_specs.yml")):
        entries = (yaml.safe_load(spec.read_text()) or {}).get("argument_specs", {})
        for entry in entries.values():
            names.update((entry or {}).get("options", {}) or {})
    return sorted(names - RUN_SCOPED)


class LookupModule(LookupBase):
    def run(self, terms: list[Any], variables: dict[str, Any] | None = None,
            **kwargs: Any) -> list[str]:
        variables = variables or {}
        try:
            render_dir = Path(self._templar.template(variables["deploykit_render_dir"]))
            host = variables["inventory_hostname"]
        except KeyError as exc:
            raise AnsibleError(f"deploykit_inputs needs {exc.args[0]}") from None
        digest = hashlib.sha256()
        for part in (render_dir / host, render_dir / "_cluster"):
            digest.update(f"\0tree {part.name}\0".encode())
            tree_digest(part, digest)
        for part in CODE:
            digest.update(f"\0code {part}\0".encode())
            tree_digest(COLLECTION / part, digest)
        values = {}
        for name in role_options(COLLECTION):
            if name in variables:
                values[name] = self._templar.template(variables[name])
        digest.update(json.dumps(values, sort_keys=True, default=str).encode())
        return [digest.hexdigest()]
