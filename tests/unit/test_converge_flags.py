"""up/down take ansible-playbook's flags and refuse what would silently do nothing or
too much: unknown tags, a --limit naming no host, `down` without a confirmation. Checked
through --print-command, which prints a command that runs from anywhere and writes nothing."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from deploy_kit.ansible.tags import known_tags
from tests.cli import run_cli
from tests.conftest import REPO, InventoryFactory


def _printed(*args: str, runs: Path) -> list[str]:
    result = run_cli(*args, "--print-command", env={"DEPLOYKIT_RUNS_DIR": str(runs)},
                     cwd=runs.parent)
    assert result.returncode == 0, result.stderr
    return shlex.split(result.stdout)


def test_print_command_passes_ansible_flags_and_writes_nothing(
        make_inventory: InventoryFactory, tmp_path: Path) -> None:
    root = make_inventory()
    runs = tmp_path / "runs"
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    words = _printed("up", "-i", str(root), "-b", "--forks", "25", "-e", "ansible_user=ops",
                     "-e", '{"foo": [1, 2]}', "--tags", "vllm_service,coredns_configure",
                     "--limit", "vllm", runs=runs)
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before
    # the user's ansible.cfg applies: deploykit adds variables, never ANSIBLE_CONFIG
    assert not any(w.startswith("ANSIBLE_CONFIG=") for w in words)
    assert words[0].startswith(f"ANSIBLE_COLLECTIONS_PATH={REPO / 'collections'}:")
    assert words[1] == "ANSIBLE_HOST_PATTERN_MISMATCH=ignore"
    assert Path(words[2]).name == "ansible-playbook" and Path(words[2]).is_absolute()
    assert words[words.index("-i") + 1] == str(root.resolve())
    assert Path(words[words.index("-i") + 2]).is_absolute()
    assert {"--become", "--forks"} <= set(words) and words[words.index("--forks") + 1] == "25"
    extra = [words[i + 1] for i, w in enumerate(words) if w == "-e"]
    assert json.loads(extra[0]) == {"vllm_serial": 1}  # the run var a plain run needs
    assert extra[1:] == ["ansible_user=ops", '{"foo": [1, 2]}']
    assert words[words.index("--tags") + 1] == "vllm_service,coredns_configure"


def test_unknown_tags_and_an_empty_limit_are_usage_errors(
        make_inventory: InventoryFactory, tmp_path: Path) -> None:
    root = str(make_inventory())
    tags = run_cli("up", "-i", root, "--tags", "vllm_servce", "--print-command")
    assert tags.returncode == 2 and "no task is tagged vllm_servce" in tags.stderr, tags
    assert "vllm_service" in tags.stderr  # what exists is listed
    skip = run_cli("up", "-i", root, "--skip-tags", "nope", "--print-command")
    assert skip.returncode == 2, skip
    limit = run_cli("up", "-i", root, "--limit", "vllm_cuda", "--print-command")
    assert limit.returncode == 2 and "matches no host" in limit.stderr, limit
    # patterns Ansible resolves itself are passed on
    fine = run_cli("up", "-i", root, "--limit", "vllm:!gpu2", "--print-command",
                   env={"DEPLOYKIT_RUNS_DIR": str(tmp_path / "runs")})
    assert fine.returncode == 0, fine


def test_down_asks_first_and_refuses_without_a_terminal(
        make_inventory: InventoryFactory, tmp_path: Path) -> None:
    root = str(make_inventory())
    refused = run_cli("down", "-i", root)
    assert refused.returncode == 2 and "pass --yes" in refused.stderr, refused
    words = _printed("down", "-i", root, "--yes", runs=tmp_path / "runs")
    extra = [json.loads(words[i + 1]) for i, w in enumerate(words) if w == "-e"]
    assert extra[0]["deploykit_destroy_data"] is False


def test_known_tags_are_the_tags_ansible_lists() -> None:
    import os
    import subprocess
    import sys

    result = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i",
         str(REPO / "inventory" / "example"), str(REPO / "playbooks" / "site.yml"),
         "--list-tags", "-e", "deploykit_render_dir=/nonexistent"],
        capture_output=True, text=True, cwd=REPO, timeout=120,
        env={**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg")})
    assert result.returncode == 0, result.stderr
    listed = {t.strip() for line in result.stdout.splitlines() if "TAGS: [" in line
              for t in line.split("TAGS: [", 1)[1].rstrip("]").split(",") if t.strip()}
    assert listed and listed <= known_tags(REPO), listed - known_tags(REPO)
    assert known_tags(REPO) - listed <= {"always"}, known_tags(REPO) - listed


def test_version_flag() -> None:
    result = run_cli("--version")
    assert result.returncode == 0 and result.stdout.startswith("deploykit ")


def test_restart_serving_reaches_the_play_as_a_run_var(make_inventory: InventoryFactory,
                                                       tmp_path: Path) -> None:
    """After `cache purge`, `up --restart-serving` makes every running
    LMCache forget the objects it believed in S3 (the serving role's heal task reads it)."""
    root = str(make_inventory())
    words = _printed("up", "-i", root, "--restart-serving", runs=tmp_path / "runs")
    extra = [json.loads(words[i + 1]) for i, w in enumerate(words) if w == "-e"]
    assert extra[0]["deploykit_restart_serving"] is True
    plain = _printed("up", "-i", root, runs=tmp_path / "runs2")
    assert "deploykit_restart_serving" not in json.loads(plain[plain.index("-e") + 1])
    heal = (REPO / "roles" / "serving" / "tasks" / "heal.yml").read_text()
    assert "deploykit_restart_serving | default(false) | bool" in heal
