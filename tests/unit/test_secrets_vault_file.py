"""Generated secrets travel with the site: where the site has a vault (flags, ANSIBLE_VAULT_*,
or ansible.cfg), `up` writes them ansible-vault encrypted into the committed
`<inventory>/.deploykit-secrets.vault.yml`; a site without one keeps the local store and
validate/plan warn; `deploykit secrets move` moves a local store into the vault file; the
site's name is committed in `.deploykit-site.yml`."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from deploy_kit.config.vault import VaultSecrets, from_password_file
from deploy_kit.ops import secrets_store
from deploy_kit.ops.site import open_site
from tests.cli import run_cli
from tests.conftest import InventoryFactory
from tests.unit.test_check_mode_writes_nothing import tree_digest
from tests.unit.test_secrets_store import ALL, fake_runner, stored  # noqa: F401 (fixture)
from tests.unit.test_vault import PROD_PASSWORD, password_file

Runs = list[dict[str, Any]]
VAULT_FILE = ".deploykit-secrets.vault.yml"


def runs(tmp_path: Path, **more: str) -> dict[str, str]:
    return {"DEPLOYKIT_RUNS_DIR": str(tmp_path / "runs"), **more}


def test_up_with_a_vault_writes_the_encrypted_vault_file_and_a_second_up_reuses_it(
        make_inventory: InventoryFactory, tmp_path: Path, fake_runner: Runs) -> None:  # noqa: F811
    root = make_inventory()
    pw = password_file(tmp_path)
    first = run_cli("up", "-i", str(root), "--vault-password-file", str(pw), env=runs(tmp_path))
    assert first.returncode == 0, first.stderr
    text = (root / VAULT_FILE).read_text()
    assert text.startswith("$ANSIBLE_VAULT;1.1;AES256")  # the `default` id: ansible-vault's
    values = stored(root, from_password_file(pw))
    assert set(values) == set(ALL)
    assert not any(v in text for v in values.values())  # encrypted, not plain
    assert not (root / ".deploykit-secrets").exists()
    assert fake_runner[-1]["content"] == {"deploykit_generated_secrets": values}
    # a second controller: the same committed file, nothing generated again
    again = run_cli("up", "-i", str(root), "--vault-password-file", str(pw), env=runs(tmp_path))
    assert again.returncode == 0 and "generated" not in again.stdout + again.stderr
    assert stored(root, from_password_file(pw)) == values
    assert fake_runner[-1]["content"] == {"deploykit_generated_secrets": values}


def test_the_vault_file_is_encrypted_for_the_vault_id_the_site_uses(
        make_inventory: InventoryFactory, tmp_path: Path, fake_runner: Runs) -> None:  # noqa: F811
    root = make_inventory()
    pw = password_file(tmp_path)
    result = run_cli("secrets", "generate", "-i", str(root), "--vault-id", f"prod@{pw}",
                     "--vault-id", f"dev@{password_file(tmp_path, 'dev', 'dev-pw')}")
    assert result.returncode == 0, result.stderr
    assert (root / VAULT_FILE).read_text().startswith("$ANSIBLE_VAULT;1.2;AES256;prod\n")
    # ansible.cfg's vault_encrypt_identity picks another (as ansible-vault's rule)
    (root / VAULT_FILE).unlink()
    cfg = tmp_path / "ansible.cfg"
    cfg.write_text("[defaults]\nvault_encrypt_identity = dev\n")
    result = run_cli("secrets", "generate", "-i", str(root), "--vault-id", f"prod@{pw}",
                     "--vault-id", f"dev@{tmp_path / 'dev'}", env={"ANSIBLE_CONFIG": str(cfg)})
    assert result.returncode == 0, result.stderr
    assert (root / VAULT_FILE).read_text().startswith("$ANSIBLE_VAULT;1.2;AES256;dev\n")


def test_a_plain_ansible_run_can_read_the_vault_file_as_extra_vars(
        make_inventory: InventoryFactory, tmp_path: Path) -> None:
    """What `ansible-playbook -e @<file> --vault-password-file` does with it: Ansible's own
    DataLoader decrypts it and finds the one variable the roles read."""
    from ansible.parsing.dataloader import DataLoader
    from ansible.parsing.vault import VaultSecret

    root = make_inventory()
    pw = password_file(tmp_path)
    assert run_cli("secrets", "generate", "-i", str(root), "--vault-password-file",
                   str(pw)).returncode == 0
    loader = DataLoader()
    loader.set_vault_secrets([("default", VaultSecret(PROD_PASSWORD.encode()))])
    doc = loader.load_from_file(str(root / VAULT_FILE))
    assert set(doc) == {"deploykit_generated_secrets"}
    assert set(doc["deploykit_generated_secrets"]) == set(ALL)


def test_ansible_cfg_vault_settings_are_honoured_everywhere(
        make_inventory: InventoryFactory, tmp_path: Path, fake_runner: Runs) -> None:  # noqa: F811
    """vault_password_file in the ansible.cfg Ansible finds (ANSIBLE_CONFIG): the vaulted
    inventory opens, `up` writes the vault file, `secrets list` shows no secret missing."""
    from tests.unit.test_vault import encrypt

    root = make_inventory(vllm={"vllm_api_key": "{{ vault_key }}"}, files={
        "group_vars/all/vault.yml": encrypt(yaml.safe_dump({"vault_key": "k" * 24}),
                                            label="default")})
    pw = password_file(tmp_path)
    cfg = tmp_path / "ansible.cfg"
    cfg.write_text(f"[defaults]\nvault_password_file = {pw.name}\n")  # relative to the file
    env = runs(tmp_path, ANSIBLE_CONFIG=str(cfg))
    up = run_cli("up", "-i", str(root), env=env)
    assert up.returncode == 0, up.stderr
    assert set(stored(root, from_password_file(pw))) == set(ALL) - {"vllm_api_key"}
    listed = run_cli("secrets", "list", "-i", str(root), "--json", env=env)
    rows = {r["name"]: r["source"] for r in json.loads(listed.stdout)["secrets"]}
    assert rows["vllm_api_key"] == "vault" and "missing" not in rows.values(), rows
    assert set(rows.values()) == {"vault", "generated"}
    # the identity list form, with a label
    (root / VAULT_FILE).unlink()
    cfg.write_text(f"[defaults]\nvault_identity_list = default@{pw}\n")
    assert run_cli("secrets", "generate", "-i", str(root), env=env).returncode == 0
    assert (root / VAULT_FILE).is_file()


def test_a_vault_file_without_the_vault_is_refused_and_never_regenerated(
        make_inventory: InventoryFactory, tmp_path: Path, fake_runner: Runs) -> None:  # noqa: F811
    root = make_inventory()
    pw = password_file(tmp_path)
    assert run_cli("secrets", "generate", "-i", str(root), "--vault-password-file",
                   str(pw)).returncode == 0
    before = tree_digest(root)
    up = run_cli("up", "-i", str(root), env=runs(tmp_path))  # a CI runner without the vault
    assert up.returncode == 3 and not fake_runner
    assert "is vault-encrypted and no vault secret was given" in up.stderr
    assert tree_digest(root) == before and not (root / ".deploykit-secrets").exists()
    validate = run_cli("validate", "-i", str(root))
    assert validate.returncode == 0 and "pass the vault flags" in validate.stderr


def test_a_site_without_a_vault_keeps_the_local_store_and_validate_and_plan_warn(
        make_inventory: InventoryFactory, tmp_path: Path, fake_runner: Runs) -> None:  # noqa: F811
    root = make_inventory()
    for verb in ("validate", "plan"):
        result = run_cli(verb, "-i", str(root))
        text = result.stdout + result.stderr
        assert result.returncode == 0 and "warning: secrets: this site has no vault" in text
        assert "cannot converge it" in text and f"deploykit secrets move -i {root}" in text
    assert run_cli("up", "-i", str(root), env=runs(tmp_path)).returncode == 0
    assert set(stored(root)) == set(ALL) and not (root / VAULT_FILE).exists()


def test_move_puts_the_local_store_into_the_vault_file_then_removes_it(
        make_inventory: InventoryFactory, tmp_path: Path) -> None:
    root = make_inventory()
    secrets_store.ensure(open_site(str(root)))
    local = stored(root)
    pw = password_file(tmp_path)
    # with a vault now, the local store is still used (nothing generated over it) and named
    warned = run_cli("validate", "-i", str(root), "--vault-password-file", str(pw))
    assert "deploykit secrets move -i" in warned.stderr
    refused = run_cli("secrets", "move", "-i", str(root))  # no vault: nothing moves
    assert refused.returncode == 3 and "no vault secret was given" in refused.stderr
    assert stored(root) == local
    moved = run_cli("secrets", "-i", str(root), "--vault-password-file", str(pw), "move")
    assert moved.returncode == 0, moved.stderr
    assert not (root / ".deploykit-secrets").exists()
    assert stored(root, from_password_file(pw)) == local
    assert not any(v in moved.stdout + moved.stderr for v in local.values())
    assert run_cli("validate", "-i", str(root), "--vault-password-file",
                   str(pw)).stderr.count("warning") == 0
    again = run_cli("secrets", "move", "-i", str(root), "--vault-password-file", str(pw))
    assert again.returncode == 0 and "nothing to move" in again.stdout + again.stderr


def test_move_refuses_a_name_both_files_hold_with_different_values(
        make_inventory: InventoryFactory, tmp_path: Path) -> None:
    root = make_inventory()
    pw = password_file(tmp_path)
    secrets_store.ensure(open_site(str(root), from_password_file(pw)))  # the vault file
    values = stored(root, from_password_file(pw))
    # deploykit writes no local store beside a vault file: one left from another checkout
    other = {**values, "consul_acl_dns_token": "00000000-0000-4000-8000-000000000000"}
    from deploy_kit.ops.secret_files import write_local

    write_local(root / ".deploykit-secrets", other)
    result = run_cli("secrets", "move", "-i", str(root), "--vault-password-file", str(pw))
    assert result.returncode == 3
    assert "consul_acl_dns_token: differs from the local store" in result.stderr
    assert (root / ".deploykit-secrets" / "secrets.yml").exists()  # nothing removed
    assert stored(root, from_password_file(pw)) == values


def test_secrets_subcommands_take_dash_i_before_or_after(
        make_inventory: InventoryFactory, tmp_path: Path) -> None:
    root = make_inventory()
    before = run_cli("secrets", "-i", str(root), "generate")
    assert before.returncode == 0, before.stderr
    values = stored(root)
    after = run_cli("secrets", "generate", "-i", str(root))
    assert after.returncode == 0 and stored(root) == values
    listed = run_cli("secrets", "-i", str(root), "list", "--json")
    assert listed.returncode == 0 and json.loads(listed.stdout)["secrets"]
    missing = run_cli("secrets", "generate")
    assert missing.returncode == 2 and "--inventory" in missing.stderr


# --- the site's identity ------------------------------------------------------------------

def test_the_first_up_commits_the_site_name_and_it_wins_over_the_directory(
        make_inventory: InventoryFactory, tmp_path: Path, fake_runner: Runs) -> None:  # noqa: F811
    root = make_inventory()
    assert run_cli("validate", "-i", str(root)).returncode == 0
    assert not (root / ".deploykit-site.yml").exists()  # read-only verbs write nothing
    up = run_cli("up", "-i", str(root), env=runs(tmp_path))
    assert up.returncode == 0 and ".deploykit-site.yml" in up.stdout + up.stderr
    assert yaml.safe_load((root / ".deploykit-site.yml").read_text()) == \
        {"deploykit_site_name": "inv"}  # the name it had: its RGW marks still fit
    renamed = tmp_path / "ci-checkout"
    shutil.copytree(root, renamed)
    from deploy_kit.render.s3_access import marker

    assert open_site(str(renamed)).name == "inv"
    assert marker(open_site(str(renamed))) == "deploykit-site=inv"
    (renamed / ".deploykit-site.yml").unlink()
    assert open_site(str(renamed)).name == "ci-checkout"  # without it: the directory's


@pytest.mark.parametrize("text, why", [
    ("deploykit_site_name: lab\nextra: 1\n", "is the only key allowed (found extra)"),
    ("deploykit_site_name: 5\n", "must be a non-empty string"),
    ("deploykit_site_name: \"a\\u0007b\"\n", "control or invisible character"),
    ("deploykit_site_name: [unclosed\n", "is not a YAML mapping"),
    ("other: lab\n", "is the only key allowed"),
])
def test_a_bad_identity_file_is_one_line_naming_file_and_key(
        make_inventory: InventoryFactory, text: str, why: str) -> None:
    root = make_inventory()
    (root / ".deploykit-site.yml").write_text(text)
    result = run_cli("validate", "-i", str(root))
    assert result.returncode == 3
    line = next(x for x in result.stderr.splitlines() if ".deploykit-site.yml" in x)
    assert "deploykit_site_name" in line and why in line, result.stderr


# --- the lab ------------------------------------------------------------------------------

def test_lab_status_names_the_vault_password_file(monkeypatch: pytest.MonkeyPatch) -> None:
    from deploykit_lab import lab, profiles

    monkeypatch.setattr(lab, "_state", dict)
    info = lab.status()
    assert info["vault_password_file"] == str(profiles.VAULT_PASSWORD)
    assert not profiles.VAULT_PASSWORD.is_relative_to(lab.lab_inventory_dir())


def test_secrets_in_vault_file_are_checked_like_the_local_store(
        make_inventory: InventoryFactory, tmp_path: Path) -> None:
    """A committed vault file holding another extra var is refused (it would ride along
    into every plain ansible-playbook run), naming the file and the key only."""
    from ansible.parsing.vault import VaultLib

    root = make_inventory()
    vault: VaultSecrets = from_password_file(password_file(tmp_path))
    doc = {"deploykit_generated_secrets": {}, "ansible_ssh_common_args": "-o ProxyCommand=x"}
    (root / VAULT_FILE).write_bytes(VaultLib(list(vault.pairs)).encrypt(yaml.safe_dump(doc)))
    result = run_cli("up", "-i", str(root), "--print-command", "--vault-password-file",
                     str(tmp_path / "prod-pass"))
    assert result.returncode == 3
    assert f"{root / VAULT_FILE}: ansible_ssh_common_args: is not allowed" in result.stderr
    assert "ProxyCommand" not in result.stdout + result.stderr


def test_a_rotation_under_way_is_kept_in_the_vault_file(
        make_inventory: InventoryFactory, tmp_path: Path) -> None:
    """begin/finish_rotation write the vault file as `up` does: the next value travels
    with the site to every controller."""
    root = make_inventory()
    vault = from_password_file(password_file(tmp_path))
    site = open_site(str(root), vault)
    secrets_store.ensure(site)
    first = stored(root, vault)
    assert secrets_store.begin_rotation(site, "vllm_api_key")
    nxt = stored(root, vault)["vllm_api_key_next"]
    assert nxt != first["vllm_api_key"] and not (root / ".deploykit-secrets").exists()
    assert secrets_store.finish_rotation(site, "vllm_api_key")
    assert stored(root, vault)["vllm_api_key"] == nxt
    assert "vllm_api_key_next" not in stored(root, vault)


def test_an_ansible_cfg_identity_is_handed_to_ansible_playbook_as_a_read_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """ansible-playbook reads the same ansible.cfg: its identity list is replaced (by a
    variable, which outranks ansible.cfg) with the file deploykit already read, so a
    password script does not run twice and a prompt is not asked twice."""
    from deploy_kit.config.vault import load_secrets, parse_identities

    pw = password_file(tmp_path)
    cfg = tmp_path / "ansible.cfg"
    cfg.write_text(f"[defaults]\nvault_identity_list = prod@{pw}\n")
    monkeypatch.setenv("ANSIBLE_CONFIG", str(cfg))
    identities = parse_identities()
    assert [(i.label, i.source) for i in identities] == [("prod", str(pw))]
    assert identities[0].given_as == f"{cfg} vault_identity_list"
    with load_secrets(identities).materialized() as handover:
        handed = Path(handover.env["ANSIBLE_VAULT_IDENTITY_LIST"].split("@", 1)[1])
        assert handed.read_text().strip() == PROD_PASSWORD and handed != pw
        assert handover.argv[:2] == ["--vault-id", f"prod@{handed}"]
