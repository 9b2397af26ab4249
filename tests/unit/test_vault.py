"""Vault secrets as Ansible has them: identities in ansible-playbook's order, labelled `1.2`
files matched by id, password scripts and `-client` scripts, one-line errors that name the
ids given and the id a file wants, and a handover to ansible-playbook without a secret in
argv. Encryption is Ansible's own VaultLib (what `ansible-vault encrypt --vault-id` does)."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
import yaml

from deploy_kit.config.vault import (
    VaultIdentity,
    VaultSecrets,
    command_flags,
    load_secrets,
    parse_identities,
    split_identity,
    vault_id_of,
)
from deploy_kit.core.errors import InventoryError
from deploy_kit.ops.site import open_site
from tests.cli import run_cli
from tests.conftest import BASE_HOSTS, InventoryFactory

PROD_PASSWORD = "prod-vault-password"
SECRET = "prod-secret-key-4711"


def encrypt(text: str, label: str = "prod", password: str = PROD_PASSWORD) -> str:
    """`ansible-vault encrypt --vault-id LABEL@FILE`: a `$ANSIBLE_VAULT;1.2;AES256;LABEL` file."""
    from ansible.parsing.vault import VaultLib, VaultSecret

    secret = VaultSecret(password.encode())
    return str(VaultLib([(label, secret)]).encrypt(text, secret, vault_id=label).decode())


def password_file(directory: Path, name: str = "prod-pass",
                  password: str = PROD_PASSWORD) -> Path:
    path = directory / name
    path.write_text(password + "\n")
    return path


@pytest.fixture
def vaulted(make_inventory: InventoryFactory) -> Path:
    """An inventory whose group_vars/all/vault.yml is encrypted for vault id `prod`."""
    return make_inventory(BASE_HOSTS, all={
        "deploykit_s3_secret_key": "{{ vault_deploykit_s3_secret_key }}"},
        files={"group_vars/all/vault.yml": encrypt(yaml.safe_dump(
            {"vault_deploykit_s3_secret_key": SECRET}))})


def secret_of(root: Path, vault: VaultSecrets) -> str:
    key = open_site(str(root), vault).hosts["gpu1"].config.deploykit_s3_secret_key
    assert key is not None
    return key.get_secret_value()


# --- identities ---------------------------------------------------------------------------

def test_identities_split_as_ansible_splits_them() -> None:
    assert split_identity("prod@/s/pw") == VaultIdentity("prod", "/s/pw", "--vault-id")
    assert split_identity("/s/pw").label == "default"
    assert split_identity("dev@prompt").prompt and split_identity("prompt").label == "default"
    assert split_identity("a@b@c") == VaultIdentity("a", "b@c", "--vault-id")  # first @ splits
    with pytest.raises(InventoryError, match="names no password file"):
        split_identity("prod@")


def test_identities_come_in_ansible_playbooks_order() -> None:
    """ANSIBLE_VAULT_IDENTITY_LIST, --vault-id, --vault-password-file,
    ANSIBLE_VAULT_PASSWORD_FILE, then the -J prompt (ansible.cli.CLI.setup_vault_secrets)."""
    found = parse_identities(["prod@/p"], [Path("/f")], ask=True, env={
        "ANSIBLE_VAULT_IDENTITY_LIST": "dev@/d, ops@prompt",
        "ANSIBLE_VAULT_PASSWORD_FILE": "/e"})
    assert [(i.label, i.source, i.given_as) for i in found] == [
        ("dev", "/d", "ANSIBLE_VAULT_IDENTITY_LIST"),
        ("ops", "prompt", "ANSIBLE_VAULT_IDENTITY_LIST"),
        ("prod", "/p", "--vault-id"),
        ("default", "/f", "--vault-password-file"),
        ("default", "/e", "ANSIBLE_VAULT_PASSWORD_FILE"),
        ("default", "prompt_ask_vault_pass", "--ask-vault-pass")]
    # --print-command repeats the flags, not the variables (ansible-playbook reads those)
    assert command_flags(found) == ["--vault-id", "prod@/p", "--vault-password-file", "/f",
                                    "--ask-vault-pass"]
    assert parse_identities(env={}) == ()


def test_the_header_names_the_id_a_file_wants() -> None:
    assert vault_id_of(encrypt("x: 1\n")) == "prod"
    from tests.conftest import encrypt_vault

    assert vault_id_of(encrypt_vault("x: 1\n")) is None  # 1.1: no id


# --- loading ------------------------------------------------------------------------------

def test_files_scripts_and_client_scripts_load_once(tmp_path: Path) -> None:
    script = tmp_path / "pass.sh"
    script.write_text("#!/bin/sh\necho scripted\n")
    script.chmod(0o700)
    # a *-client script is asked for its id, as Ansible's ClientScriptVaultSecret asks
    client = tmp_path / "keyring-client.sh"
    client.write_text('#!/bin/sh\n[ "$1" = --vault-id ] && [ "$2" = prod ] && echo for-$2 '
                      '&& exit 0\nexit 2\n')
    client.chmod(0o700)
    secrets = load_secrets(parse_identities(
        [f"prod@{client}", f"ops@{script}"], [password_file(tmp_path)], env={}))
    assert [(label, s.bytes) for label, s in secrets.pairs] == [
        ("prod", b"for-prod"), ("ops", b"scripted"), ("default", PROD_PASSWORD.encode())]
    assert PROD_PASSWORD not in repr(secrets) and "for-prod" not in repr(secrets)
    with pytest.raises(InventoryError, match="client script knows no vault id 'dev'"):
        load_secrets(parse_identities([f"dev@{client}"], env={}))


def test_a_prompt_is_asked_once_per_identity(tmp_path: Path) -> None:
    asked: list[str] = []

    def ask(identity: VaultIdentity) -> str:
        asked.append(identity.label)
        return PROD_PASSWORD

    secrets = load_secrets(parse_identities(["prod@prompt"], env={}), ask=ask)
    assert asked == ["prod"] and secrets.labels == ["prod"]
    # without a terminal deploykit says so in one line instead of hanging on a prompt
    result = run_cli("validate", "-i", "example", "--vault-id", "prod@prompt")
    assert result.returncode == 3
    assert "prod@prompt: --vault-id: needs a terminal" in result.stderr


def test_an_empty_password_file_is_refused(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.write_text("\n")
    with pytest.raises(InventoryError, match="gave an empty vault password"):
        load_secrets(parse_identities([f"prod@{empty}"], env={}))


def test_handover_is_files_0600_removed_after_the_run(tmp_path: Path) -> None:
    secrets = load_secrets(parse_identities([f"prod@{password_file(tmp_path)}"], env={}))
    with secrets.materialized() as handover:
        assert handover.argv[0] == "--vault-id" and handover.argv[1].startswith("prod@")
        given = Path(handover.argv[1].split("@", 1)[1])
        assert stat.S_IMODE(given.stat().st_mode) == 0o600
        assert stat.S_IMODE(given.parent.stat().st_mode) == 0o700
        assert given.read_text() == PROD_PASSWORD + "\n"
        assert PROD_PASSWORD not in " ".join(handover.argv)
    assert not given.parent.exists()
    with VaultSecrets().materialized() as none:
        assert none.argv == [] and none.env == {}


# --- the inventory ------------------------------------------------------------------------

def test_validate_with_the_id_the_file_was_encrypted_for(vaulted: Path, tmp_path: Path) -> None:
    pw = password_file(tmp_path)
    assert run_cli("validate", "-i", str(vaulted), "--vault-id", f"prod@{pw}").returncode == 0
    assert secret_of(vaulted, load_secrets(parse_identities([f"prod@{pw}"], env={}))) == SECRET
    # a 1.2 file is still tried with every secret (Ansible's default vault_id_match=False)
    assert run_cli("validate", "-i", str(vaulted), "--vault-password-file",
                   str(pw)).returncode == 0


def test_a_wrong_id_says_which_ids_were_given_and_which_the_file_wants(
        vaulted: Path, tmp_path: Path) -> None:
    dev = password_file(tmp_path, "dev-pass", "dev-password")
    result = run_cli("validate", "-i", str(vaulted), "--vault-id", f"dev@{dev}")
    assert result.returncode == 3
    line = next(ln for ln in result.stderr.splitlines() if "vault.yml" in ln)
    assert line.endswith("is encrypted with vault id 'prod'; ids given: dev — pass "
                         "--vault-id prod@FILE (or prod@prompt)"), line
    assert "dev-password" not in result.stderr


def test_a_wrong_password_for_the_right_id_is_one_line(vaulted: Path, tmp_path: Path) -> None:
    wrong = password_file(tmp_path, "wrong", "not-it")
    result = run_cli("validate", "-i", str(vaulted), "--vault-id", f"prod@{wrong}")
    assert result.returncode == 3
    lines = [ln for ln in result.stderr.splitlines() if "vault.yml" in ln]
    assert len(lines) == 1 and "cannot decrypt with the vault secrets given (ids: prod)" \
        in lines[0] and "check the password of id 'prod'" in lines[0], lines


def test_no_secret_for_a_vaulted_secret_is_still_a_locked_vault(vaulted: Path) -> None:
    """Nothing given: the vaulted values are unknown (render writes markers), as before."""
    assert open_site(str(vaulted)).secrets_locked


def test_the_identity_list_variable_works(vaulted: Path, tmp_path: Path) -> None:
    pw = password_file(tmp_path)
    env = {"ANSIBLE_VAULT_IDENTITY_LIST": f"dev@{password_file(tmp_path, 'd', 'x')},prod@{pw}"}
    assert run_cli("validate", "-i", str(vaulted), env=env).returncode == 0


def test_an_inline_vault_value_with_an_id(make_inventory: InventoryFactory,
                                          tmp_path: Path) -> None:
    root = make_inventory(BASE_HOSTS)
    indented = "\n".join("  " + ln for ln in encrypt(SECRET).splitlines())
    (root / "group_vars" / "all.yml").write_text(
        f"deploykit_s3_secret_key: !vault |\n{indented}\n")
    pw = password_file(tmp_path)
    assert secret_of(root, load_secrets(parse_identities([f"prod@{pw}"], env={}))) == SECRET
    dev = password_file(tmp_path, "dev-pass", "dev-password")
    result = run_cli("validate", "-i", str(root), "--vault-id", f"dev@{dev}")
    assert result.returncode == 3
    assert "all.yml: deploykit_s3_secret_key: is encrypted with vault id 'prod'; ids given: " \
           "dev" in result.stderr


def test_an_ini_inventory_read_by_ansible_matches_ids_too(make_inventory: InventoryFactory,
                                                          tmp_path: Path) -> None:
    """Ansible's own inventory API (INI, scripts, plugins) gets every (id, secret) pair."""
    root = make_inventory(BASE_HOSTS, files={"group_vars/all/vault.yml": encrypt(
        yaml.safe_dump({"deploykit_s3_secret_key": SECRET}))})
    (root / "hosts.yml").unlink()
    (root / "hosts.ini").write_text(
        "[rgw]\nrgw1 ansible_host=10.0.0.11\n[vllm]\ngpu1 ansible_host=10.0.1.1 "
        "vllm_accelerator=cuda vllm_max_model_len=32768\n[dns]\ndns1 ansible_host=10.0.0.31\n"
        "[consul_servers]\n"
        "c1 ansible_host=10.0.0.21\n[ceph_admin]\nadm1 ansible_host=10.0.0.10\n")
    pw = password_file(tmp_path)
    secrets = load_secrets(parse_identities(["dev@" + str(password_file(tmp_path, "d", "x")),
                                             f"prod@{pw}"], env={}))
    assert secret_of(root / "hosts.ini", secrets) == SECRET
    dev = load_secrets(parse_identities(["dev@" + str(tmp_path / "d")], env={}))
    with pytest.raises(InventoryError) as caught:
        open_site(str(root / "hosts.ini"), dev)
    assert "vault.yml: (file): is encrypted with vault id 'prod'; ids given: dev" in \
        str(caught.value)


def test_several_sources_merge_as_several_dash_i(make_inventory: InventoryFactory,
                                                 tmp_path: Path) -> None:
    root = make_inventory(BASE_HOSTS)
    extra = tmp_path / "extra.ini"
    extra.write_text("[vllm]\ngpu9 ansible_host=10.0.1.9 vllm_accelerator=cuda\n")
    site = open_site([str(root), str(extra)])
    assert "gpu9" in site.hosts and "gpu1" in site.hosts
    # plain str, not ansible-core's origin-tagged str (the render's YAML cannot dump those)
    assert {type(n) for n in site.hosts} == {str}
    assert {type(g) for h in site.hosts.values() for g in h.groups} == {str}
    assert site.inventory_sources == (root, extra)
    assert open_site(str(root)).inventory_sources == (root,)


# --- what ansible-playbook is handed ------------------------------------------------------

def test_print_command_shows_the_vault_flags_but_no_secret(vaulted: Path,
                                                           tmp_path: Path) -> None:
    pw = password_file(tmp_path)
    result = run_cli("up", "-i", str(vaulted), "--vault-id", f"prod@{pw}", "--print-command")
    assert result.returncode == 0, result.stderr
    assert f"--vault-id prod@{pw}" in result.stdout
    assert PROD_PASSWORD not in result.stdout + result.stderr and SECRET not in result.stdout
