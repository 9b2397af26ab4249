"""The digest of everything a run applies to one host, computed on the controller."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from ansible.errors import AnsibleError
from ansible.plugins.lookup import LookupBase

from deploy_kit.ops.inputs import INPUTS_PATH, tree_digest

DOCUMENTATION = r"""
name: deploykit_inputs
short_description: Digest of the inputs a run applies to the current host
description: >-
  sha256 over the host's rendered tree and the site-wide one (settings, every non-secret
  file, and the digest of deploykit's own roles, playbooks, plugins and agents, which the render
  wrote once in _cluster/.deploykit/inputs.json), and the value on this host of every
  option a deploykit role's argument spec names (secrets included: only their digest
  leaves this function). Two runs with the same digest apply the same things to the host.
options:
  _terms: {description: unused, required: false}
"""


class LookupModule(LookupBase):
    def run(self, terms: list[Any], variables: dict[str, Any] | None = None,
            **kwargs: Any) -> list[str]:
        variables = variables or {}
        try:
            render_dir = Path(self._templar.template(variables["deploykit_render_dir"]))
            host = variables["inventory_hostname"]
        except KeyError as exc:
            raise AnsibleError(f"deploykit_inputs needs {exc.args[0]}") from None
        try:
            options = json.loads((render_dir / "_cluster" / INPUTS_PATH.lstrip("/"))
                                 .read_text())["role_options"]
        except (OSError, ValueError, KeyError) as exc:
            raise AnsibleError(f"deploykit_inputs: {render_dir} was not rendered by this "
                               f"deploykit ({exc})") from None
        digest = hashlib.sha256()
        for part in (render_dir / host, render_dir / "_cluster"):
            digest.update(f"\0tree {part.name}\0".encode())
            tree_digest(part, digest)
        values = {name: self._templar.template(variables[name])
                  for name in options if name in variables}
        digest.update(json.dumps(values, sort_keys=True, default=str).encode())
        return [digest.hexdigest()]
