"""Phase tags select exactly their tasks; skipping a preflight leaves the roles working.

`ansible-playbook --list-tasks` against the example inventory and a rendered tree: static
imports carry their tags to every task, so the listing is what a run would execute. Each
listing is a real ansible-playbook process; one set of flags is listed once per session.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

from tests.cli import run_cli
from tests.conftest import REPO

ANSIBLE_PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"
TASK_LINE = re.compile(
    r"^\s+(?:deploykit\.kvcache\.)?(?P<role>\w+) : (?P<name>.+?)\s+TAGS: \[(?P<tags>[^\]]*)\]$")
SETTINGS_TASK = "Load the settings deploykit rendered for this host"


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("rendered")
    result = run_cli("render", "--for-roles", "-i", "example", "-o", str(out), cwd=REPO)
    assert result.returncode == 0, result.stderr
    return out


@cache
def listed(rendered: Path, *flags: str) -> tuple[tuple[str, str, set[str]], ...]:
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg")}
    result = subprocess.run(
        [str(ANSIBLE_PLAYBOOK), "-i", str(REPO / "inventory" / "example"),
         str(REPO / "playbooks" / "site.yml"), "--list-tasks",
         "-e", f"deploykit_render_dir={rendered}", *flags],
        capture_output=True, text=True, cwd=REPO, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    tasks = []
    for line in result.stdout.splitlines():
        match = TASK_LINE.match(line)
        if match:
            tags = {t.strip() for t in match["tags"].split(",") if t.strip()}
            tasks.append((match["role"], match["name"], tags))
    return tuple(tasks)  # cached: shared by the tests, read only


@pytest.mark.parametrize("tag", ["ceph_rgw_configure", "coredns_configure", "vllm_service",
                                 "lmcache_install", "consul_install", "ceph_rgw_s3_configure",
                                 "serving_env_install", "vllm_configure", "lmcache_service"])
def test_a_phase_tag_lists_only_that_phase(rendered: Path, tag: str) -> None:
    role = tag.rsplit("_", 1)[0]
    # one role serves: the tags of the three it replaced (serving_env, lmcache, vllm) live on
    role = "serving" if role in ("serving_env", "lmcache", "vllm") else role
    tasks = listed(rendered, "--tags", tag)
    phase = [t for t in tasks if tag in t[2]]
    assert phase, f"--tags {tag} selects no task"
    assert all(tag in tags or "always" in tags for _, _, tags in tasks)
    # the shared role's tasks (deploykit_common) run inside the phase that imports them
    phase_roles = {r for r, _, tags in tasks if "always" not in tags}
    assert phase_roles and phase_roles <= {role, "deploykit_common"}, phase_roles
    # settings load through the shared role (its settings.yml), tagged always
    assert ("deploykit_common", SETTINGS_TASK, {"always"}) in tasks, "no settings"


@pytest.mark.parametrize("role", ["ceph_rgw", "consul"])
def test_skipping_a_preflight_keeps_settings_and_the_other_phases(rendered: Path,
                                                                  role: str) -> None:
    everything = listed(rendered)
    skipped = listed(rendered, "--skip-tags", f"{role}_preflight")
    preflight = [t for t in everything if f"{role}_preflight" in t[2]]
    assert preflight, f"{role} has no preflight tasks"
    assert not [t for t in skipped if f"{role}_preflight" in t[2]]
    assert ("deploykit_common", SETTINGS_TASK, {"always"}) in skipped
    assert len(skipped) == len(everything) - len(preflight)


def test_preflight_runs_with_any_phase_tag(rendered: Path) -> None:
    tasks = listed(rendered, "--tags", "ceph_rgw_configure")
    assert [t for t in tasks if "ceph_rgw_preflight" in t[2]], "checks skipped by a phase tag"


def test_tags_are_found_where_a_wheel_keeps_its_roles(tmp_path: Path) -> None:
    """A wheel's content has no roles/ beside the playbooks: they live in the collection copy."""
    from deploy_kit.ansible.tags import known_tags, unknown_tags
    from deploy_kit.project import COLLECTION

    (tmp_path / "playbooks").mkdir()
    (tmp_path / "playbooks" / "site.yml").write_text("- hosts: all\n  tags: [site]\n")
    tasks = tmp_path / COLLECTION / "roles" / "coredns" / "tasks"
    tasks.mkdir(parents=True)
    (tasks / "main.yml").write_text("- name: Configure\n  tags: [coredns_configure]\n")
    assert {"site", "coredns_configure"} <= known_tags(tmp_path)
    assert unknown_tags(("coredns_configure", "nope"), tmp_path) == ["nope"]
