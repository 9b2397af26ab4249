"""Programs deploykit installs on the hosts and runs there, unattended.

Each module is a standalone script: the role copies the file itself onto the host, where only
the host's python3 runs it (no deploykit installed there), so it imports the standard library
only and nothing from deploy_kit (tests/unit/test_agents.py). What differs between hosts is
not in the file: the render writes it as a JSON file the agent reads at a fixed path
(`CONFIG` in each module).

- lmcache_heal: a serving host's LMCache agent (render/self_heal.py).
- lmcache_s3_events: LMCache's S3 trouble from the journal, as node exporter metrics
  (render/monitoring.py).
- lmcache_quota: a team host's LMCache server start sets the team's quota (its arguments
  are in the unit's ExecStartPost; render/lmcache_quota.py).
"""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).resolve().parent
# the files the roles copy onto the hosts (the controller's copy of this package)
LMCACHE_HEAL = HERE / "lmcache_heal.py"
LMCACHE_S3_EVENTS = HERE / "lmcache_s3_events.py"
LMCACHE_QUOTA = HERE / "lmcache_quota.py"
