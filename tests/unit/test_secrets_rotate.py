"""`deploykit secrets rotate -i SITE WHAT` (docs/day2.md, "Rotating secrets"): each rotation
is a flow run like `up` (its playbook, the site lock, a run record, --check), asks first or
takes --yes, refuses what is not deploykit's to rotate with nothing touched, and never shows
a value. The vLLM API key: a next key stored and handed to every run (both accepted) until
--finish makes it the only one. The playbooks themselves are proven in the lab
(tests/lab/day2/test_4_rotate.py) and the S3 key steps in test_rgw_key_module.py."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from deploy_kit.config import site_secrets
from tests.cli import run_cli
from tests.conftest import InventoryFactory
from tests.unit.test_check_mode_writes_nothing import tree_digest
from tests.unit.test_secrets_store import fake_runner, stored  # noqa: F401 (the fixture)
from tests.unit.test_vault import encrypt, password_file

Runs = list[dict[str, Any]]
GOSSIP = base64.b64encode(b"k" * 32).decode()


def playbook(run: dict[str, Any]) -> str:
    return next(Path(a).name for a in run["argv"] if str(a).endswith(".yml")
                and "/playbooks/" in str(a))


def rotate(root: Path, tmp_path: Path, *args: str) -> Any:
    return run_cli("secrets", "rotate", *args, "-i", str(root),
                   env={"DEPLOYKIT_RUNS_DIR": str(tmp_path / "runs")})


def test_the_vllm_key_is_accepted_twice_until_finish_makes_the_new_one_the_only_one(
        make_inventory: InventoryFactory, tmp_path: Path, fake_runner: Runs) -> None:  # noqa: F811
    root = make_inventory()
    assert run_cli("secrets", "generate", "-i", str(root)).returncode == 0
    old = stored(root)["vllm_api_key"]
    # without a terminal and without --yes: refused, nothing written or run
    before = tree_digest(root)
    refused = rotate(root, tmp_path, "vllm-api-key")
    assert refused.returncode == 2 and "--yes" in refused.stderr
    assert tree_digest(root) == before and not fake_runner
    # step 1: a next key beside the current one, both handed to the serving plays
    started = rotate(root, tmp_path, "vllm-api-key", "--yes")
    assert started.returncode == 0, started.stderr
    values = stored(root)
    new = values["vllm_api_key_next"]
    assert values["vllm_api_key"] == old and new != old and not new.startswith("-")
    assert playbook(fake_runner[-1]) == "rotate_vllm_key.yml"
    handed = fake_runner[-1]["content"]["deploykit_generated_secrets"]
    assert handed["vllm_api_key"] == old and handed["vllm_api_key_next"] == new
    assert "--finish" in started.stderr
    # a re-run resumes (the same next key), and a plain `up` meanwhile keeps both accepted
    assert rotate(root, tmp_path, "vllm-api-key", "--yes").returncode == 0
    assert stored(root)["vllm_api_key_next"] == new
    assert run_cli("up", "-i", str(root),
                   env={"DEPLOYKIT_RUNS_DIR": str(tmp_path / "runs")}).returncode == 0
    assert fake_runner[-1]["content"]["deploykit_generated_secrets"]["vllm_api_key_next"] == new
    # step 2: the next key becomes the only one
    finished = rotate(root, tmp_path, "vllm-api-key", "--finish", "--yes")
    assert finished.returncode == 0, finished.stderr
    values = stored(root)
    assert values["vllm_api_key"] == new and "vllm_api_key_next" not in values
    handed = fake_runner[-1]["content"]["deploykit_generated_secrets"]
    assert handed["vllm_api_key"] == new and "vllm_api_key_next" not in handed
    # no value in any output or argv
    shown = started.stdout + started.stderr + finished.stdout + finished.stderr + \
        json.dumps([r["argv"] for r in fake_runner])
    assert old not in shown and new not in shown


def test_check_mode_writes_nothing_and_runs_the_flow_in_check_mode(
        make_inventory: InventoryFactory, tmp_path: Path, fake_runner: Runs) -> None:  # noqa: F811
    root = make_inventory()
    assert run_cli("secrets", "generate", "-i", str(root)).returncode == 0
    before = tree_digest(root)
    for what in ("vllm-api-key", "s3"):
        result = rotate(root, tmp_path, what, "--check")
        assert result.returncode == 0, result.stderr
        assert "--check" in fake_runner[-1]["argv"]
    assert tree_digest(root) == before
    assert [playbook(r) for r in fake_runner] == ["rotate_vllm_key.yml", "rotate_s3.yml"]


def test_s3_rotation_runs_its_playbook_and_can_keep_the_owner_key(
        make_inventory: InventoryFactory, tmp_path: Path, fake_runner: Runs) -> None:  # noqa: F811
    root = make_inventory()
    assert rotate(root, tmp_path, "s3").returncode == 2 and not fake_runner  # asks first
    result = rotate(root, tmp_path, "s3", "--yes")
    assert result.returncode == 0, result.stderr
    assert playbook(fake_runner[-1]) == "rotate_s3.yml"
    assert '"deploykit_rotate_owner": true' in json.dumps(fake_runner[-1]["argv"]).replace(
        '\\"', '"')
    assert rotate(root, tmp_path, "s3", "--yes", "--keep-owner-key").returncode == 0
    assert '"deploykit_rotate_owner": false' in json.dumps(fake_runner[-1]["argv"]).replace(
        '\\"', '"')
    assert "old one is deleted" in result.stderr


def test_refusals_touch_nothing(make_inventory: InventoryFactory, tmp_path: Path,
                                fake_runner: Runs) -> None:  # noqa: F811
    root = make_inventory()
    assert run_cli("secrets", "generate", "-i", str(root)).returncode == 0
    before = tree_digest(root)
    for args, words in ((("nonsense", "--yes"), "rotate one of"),
                        (("s3", "--finish", "--yes"), "--finish"),
                        (("consul_acl_management_token", "--yes"), "management token"),
                        (("gossip",), "--yes")):
        result = rotate(root, tmp_path, *args)
        assert result.returncode == 2 and words in result.stderr, (args, result.stderr)
    assert tree_digest(root) == before and not fake_runner


def test_a_site_without_the_key_or_with_a_vaulted_key_is_refused(
        make_inventory: InventoryFactory, tmp_path: Path, fake_runner: Runs) -> None:  # noqa: F811
    root = make_inventory(vllm={"vllm_api_key_required": False})
    result = rotate(root, tmp_path, "vllm_api_key", "--yes")  # the name before rotation by service
    assert result.returncode == 2 and "not used" in result.stderr
    vaulted = make_inventory(vllm={"vllm_api_key": "{{ vault_vllm_api_key }}"}, files={
        "group_vars/all/vault.yml": encrypt(yaml.safe_dump({"vault_vllm_api_key": "k" * 30}))})
    pw = str(password_file(tmp_path))
    before = tree_digest(vaulted)
    result = run_cli("secrets", "rotate", "vllm-api-key", "--yes", "-i", str(vaulted),
                     "--vault-password-file", pw)
    assert result.returncode == 2 and "vllm_api_key_next" in result.stderr
    assert tree_digest(vaulted) == before and not fake_runner


def test_a_generated_api_key_never_starts_with_a_dash(monkeypatch: pytest.MonkeyPatch) -> None:
    drawn = iter(["-leading", "plain-key"])
    monkeypatch.setattr(site_secrets.secrets, "token_urlsafe", lambda n: next(drawn))
    assert site_secrets.generate("vllm_api_key") == "plain-key"


def test_a_vllm_that_may_take_one_key_only_is_refused(
        make_inventory: InventoryFactory, tmp_path: Path, fake_runner: Runs) -> None:  # noqa: F811
    # vLLM 0.10.2 pins torch 2.8: PyPI's LMCache 0.5.6 does not load there, the site's does
    root = make_inventory(vllm={"vllm_version": "0.10.2", "vllm_max_model_len": 32768,
                                "lmcache_wheel_dir": "/srv/wheelhouse/lmcache"})
    assert run_cli("secrets", "generate", "-i", str(root)).returncode == 0
    before = tree_digest(root)
    result = rotate(root, tmp_path, "vllm-api-key", "--yes")
    assert result.returncode == 2 and "0.10.2" in result.stderr and "upgrade" in result.stderr
    assert tree_digest(root) == before and not fake_runner


@pytest.mark.parametrize(("what", "names"), [
    ("consul-tokens", ("consul_acl_agent_token", "consul_acl_service_token",
                       "consul_acl_dns_token")),
    ("gossip", ("consul_gossip_key",))])
def test_consul_rotation_hands_both_values_over_then_stores_the_new_ones(
        make_inventory: InventoryFactory, tmp_path: Path, fake_runner: Runs,  # noqa: F811
        what: str, names: tuple[str, ...]) -> None:
    root = make_inventory()
    assert run_cli("secrets", "generate", "-i", str(root)).returncode == 0
    before = stored(root)
    result = rotate(root, tmp_path, what, "--yes")
    assert result.returncode == 0, result.stderr
    roll, prune = fake_runner  # two runs: roll, then (store finished) prune
    assert playbook(roll) == playbook(prune) == "rotate_consul.yml"
    kind = "tokens" if what == "consul-tokens" else "gossip"
    for run, phase in ((roll, "roll"), (prune, "prune")):
        argv = json.dumps(run["argv"]).replace('\\"', '"')
        assert f'"deploykit_rotate_consul": "{kind}"' in argv
        assert f'"deploykit_rotate_consul_phase": "{phase}"' in argv
    handed = roll["content"]["deploykit_generated_secrets"]
    last = prune["content"]["deploykit_generated_secrets"]
    after = stored(root)
    for name in names:  # the run had the old and the next value; the store keeps the new
        assert handed[name] == before[name] and handed[f"{name}_next"] == after[name]
        assert after[name] != before[name] and f"{name}_next" not in after
        # the deleting run: the store's current value is the new one, the old one retired
        assert last[name] == after[name] and last[f"{name}_retired"] == before[name]
        assert f"{name}_next" not in last
    untouched = set(before) - set(names)
    assert {k: after[k] for k in untouched} == {k: before[k] for k in untouched}
    run = prune
    shown = result.stdout + result.stderr + json.dumps([roll["argv"], run["argv"]])
    assert not any(before[n] in shown or after[n] in shown for n in names)


def test_consul_rotation_is_refused_where_consul_is_not_deploykits(
        make_inventory: InventoryFactory, tmp_path: Path, fake_runner: Runs) -> None:  # noqa: F811
    off = make_inventory(all={"consul_acl_enabled": False, "consul_gossip_encryption": False})
    for what, words in (("consul-tokens", "consul_acl_enabled"),
                        ("gossip", "consul_gossip_encryption")):
        result = rotate(off, tmp_path, what, "--yes")
        assert result.returncode == 2 and words in result.stderr, result.stderr
    vaulted = make_inventory(all={"consul_gossip_key": "{{ vault_gossip }}"}, files={
        "group_vars/all/vault.yml": encrypt(yaml.safe_dump({"vault_gossip": GOSSIP}))})
    pw = str(password_file(tmp_path))
    result = run_cli("secrets", "rotate", "gossip", "--yes", "-i", str(vaulted),
                     "--vault-password-file", pw)
    assert result.returncode == 2 and "vault" in result.stderr and "consul" in result.stderr
    assert not fake_runner


def test_a_rotation_finding_the_site_locked_writes_nothing_and_exits_7(
        make_inventory: InventoryFactory, tmp_path: Path, fake_runner: Runs,  # noqa: F811
        monkeypatch: pytest.MonkeyPatch) -> None:
    from deploy_kit.core.exit_codes import ExitCode
    from deploy_kit.ops import site_lock
    from tests.unit.test_site_lock import _holder

    monkeypatch.setenv(site_lock.LOCK_DIR_ENV, str(tmp_path / "locks"))
    root = make_inventory()
    assert run_cli("secrets", "generate", "-i", str(root)).returncode == 0
    assert rotate(root, tmp_path, "vllm-api-key", "--yes").returncode == 0  # one under way
    fake_runner.clear()
    store = next(root.glob(".deploykit-secrets/*"))
    before, before_bytes = tree_digest(root), store.read_bytes()
    proc, release = _holder(root)
    try:
        for args in (("vllm-api-key",), ("vllm-api-key", "--finish"), ("consul-tokens",),
                     ("gossip",), ("s3",)):
            result = rotate(root, tmp_path, *args, "--yes")
            assert result.returncode == ExitCode.ENVIRONMENT, (args, result.stderr)
            assert f"pid {proc.pid}" in result.stderr and "holds the lock" in result.stderr
            assert store.read_bytes() == before_bytes, args
    finally:
        release.set()  # type: ignore[attr-defined]
        proc.join(30)
    assert tree_digest(root) == before and not fake_runner


def _plays(name: str) -> list[dict[str, Any]]:
    from tests.conftest import REPO

    return [p for p in yaml.safe_load((REPO / "playbooks" / name).read_text()) if "tasks" in p]


def test_old_values_go_last_the_owner_key_too_and_consul_s_after_the_store() -> None:
    """rotate s3: both old keys are deleted in the last play, after every serving host took
    the new one (a cache or bench run under way keeps the owner's key meanwhile).
    rotate_consul.yml: nothing is deleted in the roll run; the prune run deletes the values
    handed over as <name>_retired, after the store took the new ones."""
    s3 = _plays("rotate_s3.yml")
    pruned = [[t["name"] for t in p["tasks"]
               if (t.get("deploykit.kvcache.deploykit_rgw_key") or {}).get("state") == "pruned"]
              for p in s3]
    assert pruned[:-1] == [[]] * (len(s3) - 1)
    assert pruned[-1] == ["Delete each serving identity's old keys",
                          "Delete the bucket owner's old key"]
    consul = _plays("rotate_consul.yml")
    phases = {p["name"]: ("prune" if "== 'prune'" in p["hosts"] else "roll") for p in consul}
    deleting = [p for p in consul if any(
        (t.get("deploykit.kvcache.deploykit_consul_token") or {}).get("state") == "absent"
        or (t.get("deploykit.kvcache.deploykit_consul_keyring") or {}).get("state") == "pruned"
        for t in p["tasks"])]
    assert [phases[p["name"]] for p in deleting] == ["prune"]
    text = json.dumps(deleting[0])
    assert "_retired" in text and "_next" not in text
