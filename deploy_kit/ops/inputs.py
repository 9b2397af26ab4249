"""What a host's converge record digests beyond the rendered tree: deploykit's own roles,
playbooks and plugins and the agents the roles install (deploy_kit/agents), and the names of
every role input (the argument specs' options).
Computed once per render and written to the site-wide tree, so the inputs lookup
(plugins/lookup/deploykit_inputs.py) walks no code and parses no spec per host."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

from deploy_kit.agents import HERE as AGENTS
from deploy_kit.config.models import SECRET_KEYS, HostConfig
from deploy_kit.core import trusted_yaml
from deploy_kit.project import collection_dir

INPUTS_PATH = "/.deploykit/inputs.json"
CODE = ("roles", "playbooks", "plugins")
# Options that steer one run, not what a host ends up with (the render directory is new on
# every run; --full and --restart-serving bypass the records anyway). The generated secrets
# arrive as one site-wide dict but are digested as the variables each host fills from it.
RUN_SCOPED = frozenset({"deploykit_render_dir", "deploykit_full", "deploykit_restart_serving",
                        "vllm_serial", "deploykit_generated_secrets"})
# What the host's settings.json holds (every setting but the secrets, and the computed `_`
# names): digested with the rendered tree already, so not read again per variable.
SETTINGS = frozenset(HostConfig.model_fields) - frozenset(SECRET_KEYS)


def in_settings(name: str) -> bool:
    return name in SETTINGS or name.startswith("_")


def tree_digest(root: Path, digest: Any) -> None:
    """Every file under root, path and content, in a stable order (missing: nothing)."""
    for top, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            path = Path(top) / name
            digest.update(str(path.relative_to(root)).encode() + b"\0")
            digest.update(hashlib.sha256(path.read_bytes()).digest())


def role_options(project: Path) -> list[str]:
    """Every option name of every entry point of every role's argument spec that settings.json
    does not hold: the inputs the roles read beyond the rendered tree (secrets, run options;
    tests/unit/test_roles.py keeps the specs complete)."""
    names: set[str] = set()
    for spec in sorted(collection_dir(project).glob("roles/*/meta/argument_specs.yml")):
        entries = (trusted_yaml.load(spec.read_text()) or {}).get("argument_specs", {})
        for entry in entries.values():
            names.update((entry or {}).get("options", {}) or {})
    return sorted(name for name in names - RUN_SCOPED if not in_settings(name))


def code_inputs(project: Path) -> dict[str, Any]:
    digest = hashlib.sha256()
    for part in CODE:
        digest.update(f"\0code {part}\0".encode())
        # roles and plugins: in a wheel, the collection copy (the same files as a checkout's)
        root = project if part == "playbooks" else collection_dir(project)
        tree_digest(root / part, digest)
    # the programs the roles copy onto the hosts as they are (their settings are rendered)
    digest.update(b"\0code agents\0")
    tree_digest(AGENTS, digest)
    return {"code_digest": digest.hexdigest(), "role_options": role_options(project)}
