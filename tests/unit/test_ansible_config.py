"""The user's Ansible configuration applies to deploykit's runs, found as Ansible finds it
(ANSIBLE_CONFIG, ./ansible.cfg, ~/.ansible.cfg, /etc/ansible/ansible.cfg); deploykit adds
only its own variables (deploy_kit.ansible.environment). `ansible-config dump
--only-changed`, run with deploykit's environment, is the oracle: it is what
ansible-playbook itself would use."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from deploy_kit.ansible.runner import ansible_env
from tests.cli import run_cli
from tests.conftest import REPO, InventoryFactory

PROJECT_CFG = """\
[defaults]
forks = 7
remote_user = alice
private_key_file = {key}
collections_path = mine
host_key_checking = False
callbacks_enabled = ansible.posix.profile_tasks

[ssh_connection]
ssh_args = -o ControlMaster=no
"""


def _effective(env: dict[str, str], cwd: Path) -> dict[str, str]:
    """`ansible-config dump --only-changed` as ansible-playbook would see it: name -> value."""
    result = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-config"), "dump", "--only-changed"],
        capture_output=True, text=True, cwd=cwd, timeout=120,
        env={k: v for k, v in env.items() if k != "ANSIBLE_CONFIG"} | (
            {"ANSIBLE_CONFIG": env["ANSIBLE_CONFIG"]} if "ANSIBLE_CONFIG" in env else {}))
    assert result.returncode == 0, result.stderr
    found = {}
    for line in result.stdout.splitlines():
        name, _, rest = line.partition("(")
        found[name.strip()] = rest.split("=", 1)[1].strip() if "=" in rest else ""
    return found


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project directory with its own ansible.cfg, as the working directory; no
    ANSIBLE_* variable from the calling environment."""
    where = tmp_path / "project"
    where.mkdir()
    (where / "ansible.cfg").write_text(PROJECT_CFG.format(key=tmp_path / "id_alice"))
    for name in [k for k in os.environ if k.startswith("ANSIBLE_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no ~/.ansible.cfg of the caller's
    monkeypatch.chdir(where)
    return where


def test_a_project_ansible_cfg_applies_beside_deploykits_own_settings(
        project: Path, tmp_path: Path) -> None:
    env = {**os.environ, **ansible_env()}
    assert "ANSIBLE_CONFIG" not in env
    seen = _effective(env, project)
    assert seen["CONFIG_FILE"] == str(project / "ansible.cfg")
    assert seen["DEFAULT_FORKS"] == "7"
    assert seen["DEFAULT_REMOTE_USER"] == "alice"
    assert seen["DEFAULT_PRIVATE_KEY_FILE"] == str(tmp_path / "id_alice")
    assert seen["CALLBACKS_ENABLED"] == "['ansible.posix.profile_tasks']"
    # deploykit's requirements still hold; the user's collections stay on the path after
    assert seen["COLLECTIONS_PATHS"] == f"['{REPO / 'collections'}', '{project / 'mine'}']"
    assert seen["HOST_PATTERN_MISMATCH"] == "ignore"
    # stated explicitly: ansible-runner turns host key checking off unless it is set
    assert env["ANSIBLE_HOST_KEY_CHECKING"] == "False"


def test_without_any_ansible_cfg_ansibles_defaults_apply(
        project: Path, tmp_path: Path) -> None:
    (project / "ansible.cfg").unlink()
    env = {**os.environ, **ansible_env()}
    seen = _effective(env, project)
    assert "DEFAULT_FORKS" not in seen and seen["CONFIG_FILE"] == "None", seen
    home = tmp_path / "home" / ".ansible"
    assert seen["COLLECTIONS_PATHS"] == (f"['{REPO / 'collections'}', '{home}/collections', "
                                         "'/usr/share/ansible/collections']")
    assert env["ANSIBLE_HOST_KEY_CHECKING"] == "True"  # Ansible's default, kept


def test_ansible_config_in_the_environment_wins_over_the_working_directory(
        project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    other = tmp_path / "other.cfg"
    other.write_text("[defaults]\nforks = 11\n")
    monkeypatch.setenv("ANSIBLE_CONFIG", str(other))
    env = {**os.environ, **ansible_env()}
    assert env["ANSIBLE_CONFIG"] == str(other)  # the user's, untouched
    seen = _effective(env, project)
    assert seen["DEFAULT_FORKS"] == "11" and "DEFAULT_REMOTE_USER" not in seen


def test_print_command_shows_deploykits_variables_and_runs_under_the_users_config(
        project: Path, make_inventory: InventoryFactory, tmp_path: Path) -> None:
    root = make_inventory()
    result = run_cli("up", "-i", str(root), "--print-command",
                     env={"DEPLOYKIT_RUNS_DIR": str(tmp_path / "runs")}, cwd=project)
    assert result.returncode == 0, result.stderr
    words = shlex.split(result.stdout)
    variables = dict(w.split("=", 1) for w in words[:2])
    assert variables == {
        "ANSIBLE_COLLECTIONS_PATH": f"{REPO / 'collections'}:{project / 'mine'}",
        "ANSIBLE_HOST_PATTERN_MISMATCH": "ignore"}
    seen = _effective({**os.environ, **variables}, project)
    assert seen["DEFAULT_FORKS"] == "7" and seen["HOST_PATTERN_MISMATCH"] == "ignore"


def test_an_unreadable_ansible_cfg_is_an_environment_problem_naming_it(
        project: Path, make_inventory: InventoryFactory) -> None:
    (project / "ansible.cfg").write_text("[defaults\nforks = 7\n")
    result = run_cli("up", "-i", str(make_inventory()), "--print-command", cwd=project)
    assert result.returncode == 7, result
    assert "Ansible cannot read its configuration" in result.stderr
    assert str(project / "ansible.cfg") in result.stderr
