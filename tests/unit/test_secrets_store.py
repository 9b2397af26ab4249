"""Generated secrets: secure defaults whose secrets the inventory leaves unset are generated
once by `up` only: into the committed vault file where the site has a vault
(tests/unit/test_secrets_vault_file.py), else into <inventory>/.deploykit-secrets/ (0700,
git-ignored, one 0600 file written atomically); the inventory and vault always win; check
mode and the read-only verbs write nothing; no value reaches argv, --print-command, output
or a run record."""

from __future__ import annotations

import base64
import json
import os
import stat
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from deploy_kit.ansible import runner
from deploy_kit.ansible.command import playbook_argv
from deploy_kit.ansible.events import RunRecord
from deploy_kit.config import site_secrets
from deploy_kit.config.vault import VaultSecrets, from_password_file
from deploy_kit.ops import secret_files, secrets_store
from deploy_kit.ops.site import open_site
from deploy_kit.plan.plan import security_opt_outs
from tests.cli import run_cli
from tests.conftest import InventoryFactory
from tests.unit.test_check_mode_writes_nothing import tree_digest
from tests.unit.test_vault import encrypt, password_file

ALL = ("vllm_api_key", "consul_acl_management_token", "consul_acl_agent_token",
       "consul_acl_service_token", "consul_acl_dns_token", "consul_gossip_key")
VAULT_KEY = "vault-api-key-0815-abcdefgh"


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def stored(root: Path, vault: VaultSecrets | None = None) -> dict[str, str]:
    """The generated secrets as written: the local store, or (`vault` given) the vault
    file, decrypted here with Ansible's own VaultLib."""
    if vault is None:
        text = (root / ".deploykit-secrets" / "secrets.yml").read_text()
    else:
        from ansible.parsing.vault import VaultLib

        text = VaultLib(list(vault.pairs)).decrypt(
            (root / ".deploykit-secrets.vault.yml").read_text()).decode()
    values: dict[str, str] = yaml.safe_load(text)["deploykit_generated_secrets"]
    return values


@pytest.fixture
def fake_runner(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The playbook run replaced: what Ansible would have been given (argv, the generated
    extra-vars file's mode, directory mode and content while the run lasts)."""
    seen: list[dict[str, Any]] = []

    def run(request: Any, console: Any, record_dir: Path,
            env: Any = None) -> tuple[RunRecord, Path, int]:
        files = [p for p in request.extra_vars_files if p.name == "generated.json"]
        entry: dict[str, Any] = {"argv": playbook_argv(request), "files": files}
        if files:
            entry |= {"mode": mode(files[0]), "dir_mode": mode(files[0].parent),
                      "content": json.loads(files[0].read_text())}
        seen.append(entry)
        return RunRecord(), record_dir, 0

    monkeypatch.setattr(runner, "run_playbook", run)
    return seen


def test_a_default_site_needs_every_secret_and_each_has_its_format(
        make_inventory: InventoryFactory) -> None:
    site = open_site(str(make_inventory()))
    assert site_secrets.gaps(site) == list(ALL)
    for name in ALL:
        value = site_secrets.generate(name)
        if name == "consul_gossip_key":
            assert len(base64.b64decode(value, validate=True)) == 32
        elif name.startswith("consul_acl_"):
            assert uuid.UUID(value).version == 4 and str(uuid.UUID(value)) == value
        else:
            assert len(value) >= 40 and value != site_secrets.generate(name)


def test_opt_outs_need_no_secret_and_plan_warns_about_each(
        make_inventory: InventoryFactory) -> None:
    root = make_inventory(all={"consul_acl_enabled": False, "consul_gossip_encryption": False,
                               "vllm_api_key_required": False})
    site = open_site(str(root))
    assert site_secrets.gaps(site) == [] and site_secrets.used(site) == []
    warned = "\n".join(security_opt_outs(site))
    for name in ("consul_acl_enabled: false", "consul_gossip_encryption: false",
                 "vllm_api_key_required: false"):
        assert name in warned
    assert security_opt_outs(open_site(str(make_inventory(all={})))) == []  # defaults: none


def test_ensure_writes_a_private_git_ignored_store_once(
        make_inventory: InventoryFactory) -> None:
    root = make_inventory()
    os.umask(0)  # the modes come from deploykit, not from a friendly umask
    try:
        fill = secrets_store.ensure(open_site(str(root)))
    finally:
        os.umask(0o022)
    store = root / ".deploykit-secrets"
    assert fill.generated == ALL and set(fill.values) == set(ALL)
    assert mode(store) == 0o700 and mode(store / "secrets.yml") == 0o600
    assert (store / ".gitignore").read_text().splitlines()[-1] == "*"
    assert stored(root) == fill.values
    assert [p.name for p in store.iterdir() if p.name.startswith(".secrets")] == []  # no temp
    again = secrets_store.ensure(open_site(str(root)))
    assert again.generated == () and again.values == fill.values  # kept, not regenerated


def test_a_failed_write_leaves_neither_a_partial_store_nor_a_temp_file(
        make_inventory: InventoryFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    root = make_inventory()

    def boom(src: Any, dst: Any) -> None:
        assert mode(Path(src)) == 0o600  # private before the rename too
        raise OSError("disk full")

    monkeypatch.setattr(secret_files.os, "replace", lambda src, dst, **_: boom(
        Path(f"/proc/self/fd/{_['src_dir_fd']}") / src, dst))
    with pytest.raises(OSError):
        secrets_store.ensure(open_site(str(root)))
    assert sorted(p.name for p in (root / ".deploykit-secrets").iterdir()) == [".gitignore"]


def test_the_vault_wins_and_the_store_only_fills_gaps(
        make_inventory: InventoryFactory, tmp_path: Path) -> None:
    root = make_inventory(vllm={"vllm_api_key": "{{ vault_vllm_api_key }}"}, files={
        "group_vars/all/vault.yml": encrypt(yaml.safe_dump({"vault_vllm_api_key": VAULT_KEY}))})
    vault = from_password_file(password_file(tmp_path))
    site = open_site(str(root), vault)
    assert "vllm_api_key" not in site_secrets.gaps(site)
    fill = secrets_store.ensure(site)
    assert "vllm_api_key" not in fill.values and "vllm_api_key" not in stored(root, vault)
    # a store that holds one anyway (written before the vault had it) changes nothing
    values = {**stored(root, vault), "vllm_api_key": "stale-generated-key-1234567890"}
    secrets_store._write(site, values)
    filled = secrets_store.with_stored(open_site(str(root), vault))
    for host in ("gpu1", "gpu2"):
        key = filled.hosts[host].config.vllm_api_key
        assert key is not None and key.get_secret_value() == VAULT_KEY
    token = filled.hosts["c1"].config.consul_acl_agent_token
    assert token is not None and token.get_secret_value() == values["consul_acl_agent_token"]


def test_a_key_set_for_one_host_fills_only_the_other(make_inventory: InventoryFactory,
                                                     tmp_path: Path) -> None:
    root = make_inventory(files={
        "host_vars/gpu1.yml": "vllm_api_key: '{{ vault_key }}'\n",
        "group_vars/all/vault.yml": encrypt(yaml.safe_dump({"vault_key": VAULT_KEY}))})
    vault = from_password_file(password_file(tmp_path))
    site = open_site(str(root), vault)
    assert site_secrets.hosts_lacking(site, "vllm_api_key") == ["gpu2"]
    fill = secrets_store.ensure(site)
    filled = site_secrets.fill(site, fill.values)
    gpu1, gpu2 = (filled.hosts[h].config.vllm_api_key for h in ("gpu1", "gpu2"))
    assert gpu1 is not None and gpu1.get_secret_value() == VAULT_KEY
    assert gpu2 is not None and gpu2.get_secret_value() == fill.values["vllm_api_key"]


def test_a_store_others_may_read_is_refused(make_inventory: InventoryFactory) -> None:
    root = make_inventory()
    secrets_store.ensure(open_site(str(root)))
    (root / ".deploykit-secrets" / "secrets.yml").chmod(0o644)
    result = run_cli("verify", "-i", str(root))
    assert result.returncode == 3
    assert "accessible to others (mode 0644)" in result.stderr and "chmod 600" in result.stderr


def test_read_only_verbs_and_check_mode_write_nothing_and_say_what_up_generates(
        make_inventory: InventoryFactory, tmp_path: Path,
        fake_runner: list[dict[str, Any]]) -> None:
    root = make_inventory()
    before = tree_digest(root)
    runs = {"DEPLOYKIT_RUNS_DIR": str(tmp_path / "runs")}
    for args in (("validate",), ("plan",), ("render", "-o", str(tmp_path / "out")),
                 ("up", "--check"), ("up", "--print-command"), ("secrets",)):
        result = run_cli(*args[:1], "-i", str(root), *args[1:], env=runs)
        assert result.returncode == 0, (args, result.stderr)
        assert tree_digest(root) == before, args
        if args[0] in ("validate", "plan", "render"):
            assert "vllm_api_key" in result.stdout + result.stderr, args
    # check mode ran with throwaway values, in a 0600 file that is gone afterwards
    (run,) = fake_runner
    assert run["mode"] == 0o600 and run["dir_mode"] == 0o700
    assert set(run["content"]["deploykit_generated_secrets"]) == set(ALL)
    assert not run["files"][0].exists()
    text = json.dumps(run["argv"])
    assert not any(v in text for v in run["content"]["deploykit_generated_secrets"].values())


def test_up_generates_hands_over_only_the_gaps_and_prints_no_value(
        make_inventory: InventoryFactory, tmp_path: Path,
        fake_runner: list[dict[str, Any]]) -> None:
    root = make_inventory(vllm={"vllm_api_key": "{{ vault_vllm_api_key }}"}, files={
        "group_vars/all/vault.yml": encrypt(yaml.safe_dump({"vault_vllm_api_key": VAULT_KEY}))})
    runs = {"DEPLOYKIT_RUNS_DIR": str(tmp_path / "runs")}
    pw = str(password_file(tmp_path))
    result = run_cli("up", "-i", str(root), "--vault-password-file", pw, env=runs)
    assert result.returncode == 0, result.stderr
    assert not (root / ".deploykit-secrets").exists()  # a site with a vault: the vault file
    values = stored(root, from_password_file(Path(pw)))
    assert set(values) == set(ALL) - {"vllm_api_key"}  # the vault's key is not generated
    (run,) = fake_runner
    assert run["content"] == {"deploykit_generated_secrets": values}
    assert not run["files"][0].exists()
    printed = run_cli("up", "-i", str(root), "--vault-password-file", pw, "--print-command",
                      env=runs)
    shown = result.stdout + result.stderr + printed.stdout + printed.stderr + \
        json.dumps(run["argv"])
    assert str(root / ".deploykit-secrets.vault.yml") in printed.stdout
    assert not any(v in shown for v in [*values.values(), VAULT_KEY])
    listed = run_cli("secrets", "list", "-i", str(root), "--vault-password-file", pw, "--json")
    rows = {r["name"]: r for r in json.loads(listed.stdout)["secrets"]}
    assert rows["vllm_api_key"]["source"] == "vault"
    assert rows["vllm_api_key"]["where"].endswith(
        "group_vars/vllm.yml:vllm_api_key -> vault_vllm_api_key")
    assert rows["consul_gossip_key"]["source"] == "generated"
    assert not any(v in listed.stdout for v in [*values.values(), VAULT_KEY])


