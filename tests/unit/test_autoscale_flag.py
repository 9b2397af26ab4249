"""The PG autoscaler: deploykit's pools are per-pool `autoscale_mode off`;
Ceph's cluster-wide `noautoscale` flag is set only when ceph_rgw_pools_noautoscale asks, is
recorded in a config-key, and is cleared (by `down`, or a run without the setting) only when
deploykit set it. The role's own task files run through ansible-playbook against a `ceph`
that keeps the flag and the config-keys in files."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from deploy_kit.ops.rundir import SETTINGS_PATH, role_tree
from deploy_kit.ops.site import open_site
from deploy_kit.plan.plan import build_plan
from tests.conftest import REPO

TASKS = REPO / "roles" / "ceph_rgw_pools" / "tasks"

FAKE_CEPH = r"""#!/bin/sh
# ceph --conf CONF <words>: the flag and the config-keys kept as files
state="$FAKE_CEPH_STATE"
shift 2
echo "$*" >> "$state/log"
case "$*" in
  "osd pool get noautoscale")
    on=off; [ -f "$state/flag" ] && on=on; echo "noautoscale is $on" >&2 ;;
  "osd pool set noautoscale") touch "$state/flag" ;;
  "osd pool unset noautoscale") rm -f "$state/flag" ;;
  "config-key exists deploykit/noautoscale")
    [ -f "$state/key" ] && exit 0; echo "key 'deploykit/noautoscale' doesn't exist" >&2; exit 2 ;;
  "config-key set deploykit/noautoscale set by deploykit") touch "$state/key" ;;
  "config-key rm deploykit/noautoscale") rm -f "$state/key" ;;
  *) echo "unexpected: $*" >&2; exit 22 ;;
esac
"""


@pytest.fixture
def ceph(tmp_path: Path) -> Path:
    state = tmp_path / "state"
    state.mkdir()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ceph").write_text(FAKE_CEPH)
    (bin_dir / "ceph").chmod(0o755)
    return state


def run_tasks(work: Path, tasks: str, noautoscale: bool, check: bool = False,
              conf: str = "/etc/ceph/ceph.conf", env: dict[str, str] | None = None
              ) -> dict[str, int]:
    """One run of a ceph_rgw_pools task file on localhost; the play recap's counts (ok,
    changed, failed...). tests/integration/test_rgw_loopback.py runs it on a real Ceph."""
    playbook = work / "play.yml"
    playbook.write_text(yaml.safe_dump([{
        "hosts": "localhost", "gather_facts": False,
        "vars": {"ceph_rgw_pools_noautoscale": noautoscale, "ceph_rgw_pools_list": [],
                 "deploykit_ceph_conf": conf,
                 "_deploykit_site": {"ceph": {"noautoscale_flag": True}}},
        "tasks": [{"ansible.builtin.import_tasks": str(TASKS / tasks)}]}]))
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
           "ANSIBLE_LOCALHOST_WARNING": "false", **(env or {})}
    done = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), str(playbook),
                           "-e", f"ansible_python_interpreter={sys.executable}",
                           *(["--check"] if check else [])],
                          capture_output=True, text=True, timeout=300, cwd=REPO, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    recap = re.search(r"^localhost\s*:\s*(.+)$", done.stdout, re.M)
    assert recap, done.stdout[-3000:]
    return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", recap.group(1))}


def _play(state: Path, tasks: str, noautoscale: bool, check: bool = False) -> dict[str, int]:
    return run_tasks(state.parent, tasks, noautoscale, check,
                     env={"FAKE_CEPH_STATE": str(state),
                          "PATH": f"{state.parent / 'bin'}:{os.environ['PATH']}"})


def _writes(state: Path) -> list[str]:
    """The ceph commands that changed something (every other one only reads)."""
    log = (state / "log").read_text().splitlines() if (state / "log").exists() else []
    return [line for line in log if line.split()[:3] != ["osd", "pool", "get"]
            and line.split()[:2] != ["config-key", "exists"]]


def test_the_default_leaves_the_cluster_wide_flag_alone(ceph: Path) -> None:
    stats = _play(ceph, "configure.yml", noautoscale=False)
    assert stats["changed"] == 0 and not (ceph / "flag").exists()
    assert _writes(ceph) == []


def test_an_admins_flag_survives_up_and_down(ceph: Path) -> None:
    (ceph / "flag").touch()  # set by the cluster's admin: no deploykit record
    for tasks in ("configure.yml", "restore_autoscale.yml"):
        assert _play(ceph, tasks, noautoscale=False)["changed"] == 0
        assert (ceph / "flag").exists() and not (ceph / "key").exists()


def test_the_flag_deploykit_set_is_recorded_idempotent_and_restored(ceph: Path) -> None:
    assert _play(ceph, "configure.yml", noautoscale=True)["changed"] == 2
    assert (ceph / "flag").exists() and (ceph / "key").exists()
    assert _play(ceph, "configure.yml", noautoscale=True)["changed"] == 0  # a re-run
    # check mode reports the restore but leaves the cluster as it is
    _play(ceph, "restore_autoscale.yml", noautoscale=True, check=True)
    assert (ceph / "flag").exists() and (ceph / "key").exists()
    assert _play(ceph, "restore_autoscale.yml", noautoscale=True)["changed"] == 2  # `down`
    assert not (ceph / "flag").exists() and not (ceph / "key").exists()
    assert _play(ceph, "restore_autoscale.yml", noautoscale=True)["changed"] == 0


def test_dropping_the_setting_restores_the_autoscaler(ceph: Path) -> None:
    _play(ceph, "configure.yml", noautoscale=True)
    assert _play(ceph, "configure.yml", noautoscale=False)["changed"] == 2
    assert not (ceph / "flag").exists() and not (ceph / "key").exists()


def test_check_mode_sets_nothing(ceph: Path) -> None:
    _play(ceph, "configure.yml", noautoscale=True, check=True)
    assert not (ceph / "flag").exists() and not (ceph / "key").exists()
    assert _writes(ceph) == []


def test_the_example_plans_and_renders_no_cluster_wide_flag() -> None:
    site = open_site(str(REPO / "inventory" / "example"))
    plan = build_plan(site)
    assert plan.site["pg_autoscaler"].startswith("off on these pools only")
    admin = site.group("ceph_admin")[0].name
    settings = json.loads(role_tree(site)[admin][SETTINGS_PATH].content)
    assert settings["ceph_rgw_pools_noautoscale"] is False
    pools = (TASKS / "configure.yml").read_text()
    assert 'autoscale_mode: "off"' in pools  # deploykit's own pools: per pool, always
