#!/usr/bin/python
"""Documentation of the deploykit_verify action (it runs on the controller only)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: deploykit_verify
short_description: Run deploykit's verify checks against the run's inventory
description: >-
  Opens the site from every inventory source of the run with the vault secrets
  ansible-playbook was given, probes the deployed tier (DNS, concentrators, S3, Ceph,
  serving hosts) and judges it with deploykit's checks, exactly as `deploykit verify --json`
  does. Writes that JSON report to C(report) and returns its path. It does not fail on FAIL
  findings itself (the deploykit.kvcache.verify playbook publishes the report, then
  asserts), only when the inventory cannot be opened.
options:
  inventory:
    type: raw
    description: inventory sources to open instead of the run's own (a path or a list)
  checks:
    type: list
    elements: str
    description: only these check ids (default every check)
  limit:
    type: str
    description: >-
      as C(deploykit verify --limit): only these hosts are contacted; checks that need
      others skip, saying why
  report:
    type: path
    description: >-
      where the JSON report goes (default the ansible-runner job's artifact directory,
      AWX_ISOLATED_DATA_DIR, else a new file in the system temp directory)
  storage_result:
    type: path
    description: the C(deploykit bench storage) result the break-even check compares with
attributes:
  check_mode: {support: full}
notes: [Action plugin; reads only, never changes a host.]
author: deploykit
"""

RETURN = r"""
schema: {description: "the report's schema (deploykit-verify/1)", type: str}
report_path: {description: where the report was written, type: str}
counts: {description: findings per status (PASS, FAIL, WARN, SKIP, INFO), type: dict}
failed_checks: {description: "one line per FAIL finding", type: list}
unreachable_hosts: {description: "host -> why, for hosts no probe reached", type: dict}
probe_errors: {description: probes that could not run, type: list}
"""
