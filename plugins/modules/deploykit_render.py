#!/usr/bin/python
"""Documentation of the deploykit_render action (it runs on the controller only)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: deploykit_render
short_description: Render every host's deploykit files on the controller, once per run
description: >-
  Opens the site from every inventory source of the run (ansible_inventory_sources) with the
  vault secrets ansible-playbook was given (--vault-id, --vault-password-file, -J,
  ANSIBLE_VAULT_IDENTITY_LIST), validates it as `deploykit validate` does, issues the RGW
  TLS certificates as `deploykit up` does, and writes the roles' tree (no secret files)
  into a new directory under Ansible's local temp directory, which ansible-playbook removes
  when it exits. Runs in process on the controller; never contacts a host.
options:
  inventory:
    type: raw
    description: inventory sources to open instead of the run's own (a path or a list)
  parent:
    type: path
    description: where the rendered directory is made (default Ansible's local temp dir)
attributes:
  check_mode: {support: full}
notes: [Action plugin; the play's hosts do not matter, it runs on the controller.]
author: deploykit
"""

RETURN = r"""
path: {description: the rendered directory, type: str}
files: {description: files written, type: int}
hosts: {description: hosts of the site, type: list}
issued: {description: RGW hosts whose TLS certificate was issued now, type: list}
"""
