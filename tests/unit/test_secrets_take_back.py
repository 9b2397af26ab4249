"""A second controller without the site's secrets: the running site refuses the values its
`up` generated (playbooks/secrets_agree.yml), and they leave the store again, so the next run
from that controller does not take them for the site's. A failure anywhere else keeps them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from deploy_kit.ansible import runner
from deploy_kit.ansible.events import FailedTask, HostStats, RunRecord
from deploy_kit.flows.converge import SECRETS_AGREE_PLAY
from tests.cli import run_cli
from tests.conftest import REPO, InventoryFactory


def failing_in(monkeypatch: pytest.MonkeyPatch, play: str, changed: int) -> None:
    def run(request: Any, console: Any, record_dir: Path,
            env: Any = None) -> tuple[RunRecord, Path, int]:
        record = RunRecord(hosts={"rgw1": HostStats(ok=3, changed=changed, failed=1)})
        record.failed.append(FailedTask(host="rgw1", play=play, task="t", message="m"))
        return record, record_dir, 2

    monkeypatch.setattr(runner, "run_playbook", run)


def test_the_play_name_is_the_playbooks() -> None:
    plays = yaml.safe_load((REPO / "playbooks" / "secrets_agree.yml").read_text())
    assert [p["name"] for p in plays if "hosts" in p] == [SECRETS_AGREE_PLAY]


def test_values_the_running_site_refused_leave_the_store(
        make_inventory: InventoryFactory, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    root = make_inventory()
    failing_in(monkeypatch, SECRETS_AGREE_PLAY, changed=0)
    result = run_cli("up", "-i", str(root), env={"DEPLOYKIT_RUNS_DIR": str(tmp_path / "r")})
    assert result.returncode == 4, result.stderr
    assert "took back" in result.stdout + result.stderr
    assert not (root / ".deploykit-secrets").exists()


@pytest.mark.parametrize(("play", "changed"), [("Deploy the serving hosts", 0),
                                               (SECRETS_AGREE_PLAY, 2)])
def test_a_run_that_may_have_installed_them_keeps_them(
        make_inventory: InventoryFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        play: str, changed: int) -> None:
    root = make_inventory()
    failing_in(monkeypatch, play, changed)
    result = run_cli("up", "-i", str(root), env={"DEPLOYKIT_RUNS_DIR": str(tmp_path / "r")})
    assert result.returncode == 4, result.stderr
    assert (root / ".deploykit-secrets" / "secrets.yml").is_file()
