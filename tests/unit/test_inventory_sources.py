"""Inventories as operators already have them: kubespray's `-i path/hosts.yml`, an INI file
with group_vars beside it, an inventory script (what AWX/AAP hand a job), inline `!vault`
values from `ansible-vault encrypt_string`, and a password script. Each must give the same
typed site as deploykit's own folder, and a bad value must still name its file and key."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
import yaml

from deploy_kit.core.errors import InventoryError
from deploy_kit.ops.site import open_site
from tests.cli import run_cli
from tests.conftest import BASE_HOSTS, VAULT_PASSWORD, InventoryFactory, vault_password_file

GROUP_VARS = {"all": {"deploykit_s3_fqdn": "s3.fleet.test", "deploykit_s3_region": "fleet-1"}}


def _shape(inventory: Path | str, password: Path | None = None) -> dict[str, object]:
    site = open_site(str(inventory), password)
    return {name: (h.address, sorted(h.groups), h.config.deploykit_s3_fqdn,
                   h.config.deploykit_s3_region, h.config.vllm_accelerator)
            for name, h in site.hosts.items()}


def _ini(hosts: dict) -> str:
    lines: list[str] = []
    for group, members in hosts["all"]["children"].items():
        lines.append(f"[{group}]")
        for name, hostvars in members["hosts"].items():
            lines.append(" ".join([name, *(f"{k}={v}" for k, v in hostvars.items())]))
        lines.append("")
    return "\n".join(lines)


def _encrypt_string(value: str) -> str:
    """What `ansible-vault encrypt_string` prints after `!vault |`."""
    from ansible.parsing.vault import VaultLib, VaultSecret

    text = VaultLib([("default", VaultSecret(VAULT_PASSWORD.encode()))]).encrypt(value)
    return text.decode()


def test_a_single_yaml_file_is_the_same_site_as_its_folder(
        make_inventory: InventoryFactory) -> None:
    root = make_inventory(BASE_HOSTS, **GROUP_VARS)
    assert _shape(root / "hosts.yml") == _shape(root)
    site = open_site(str(root / "hosts.yml"))
    assert site.inventory_source == root / "hosts.yml"  # what Ansible is handed


def test_an_ini_inventory_with_group_vars_beside_it(make_inventory: InventoryFactory) -> None:
    root = make_inventory(BASE_HOSTS, **GROUP_VARS)
    (root / "hosts.ini").write_text(_ini(BASE_HOSTS))
    yaml_shape = _shape(root)
    (root / "hosts.yml").unlink()
    assert _shape(root / "hosts.ini") == yaml_shape
    assert _shape(root) == yaml_shape  # a folder holding the INI file


def test_an_inventory_script_as_awx_hands_a_job(make_inventory: InventoryFactory) -> None:
    root = make_inventory(BASE_HOSTS, **GROUP_VARS)
    yaml_shape = _shape(root)
    groups = {g: {"hosts": list(m["hosts"])} for g, m in BASE_HOSTS["all"]["children"].items()}
    hostvars = {n: v for m in BASE_HOSTS["all"]["children"].values()
                for n, v in m["hosts"].items()}
    listing = {**groups, "all": {"vars": GROUP_VARS["all"]},
               "_meta": {"hostvars": hostvars}}
    script = root.parent / "awx-inventory.py"
    # `--list` prints every group and, under _meta, every host's variables
    script.write_text(f"#!/bin/sh\ncat <<'EOF'\n{json.dumps(listing)}\nEOF\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    assert _shape(script) == yaml_shape


def test_a_bad_value_in_an_ini_inventory_names_the_file_and_key(
        make_inventory: InventoryFactory, tmp_path: Path) -> None:
    root = make_inventory(BASE_HOSTS, **GROUP_VARS)
    (root / "hosts.yml").unlink()
    hosts = json.loads(json.dumps(BASE_HOSTS))
    hosts["all"]["children"]["vllm"]["hosts"]["gpu1"]["vllm_accelerator"] = "tpu"
    (root / "hosts.ini").write_text(_ini(hosts))
    result = run_cli("validate", "-i", str(root / "hosts.ini"))
    assert result.returncode == 3, result
    assert f"{root / 'hosts.ini'}" in result.stderr and "vllm_accelerator" in result.stderr, \
        result.stderr


def test_an_empty_folder_still_says_what_is_missing(tmp_path: Path) -> None:
    (tmp_path / "inv").mkdir()
    with pytest.raises(InventoryError, match=r"hosts\.yml: missing"):
        open_site(str(tmp_path / "inv"))


def test_inline_vault_values_decrypt_and_count_as_vaulted(
        make_inventory: InventoryFactory) -> None:
    root = make_inventory(BASE_HOSTS)
    secret = _encrypt_string("from-an-inline-vault")
    indented = "\n".join("  " + line for line in secret.splitlines())
    (root / "group_vars" / "all.yml").write_text(
        f"deploykit_s3_fqdn: s3.fleet.test\ndeploykit_s3_secret_key: !vault |\n{indented}\n")
    site = open_site(str(root), vault_password_file(root.parent))
    key = site.hosts["gpu1"].config.deploykit_s3_secret_key
    assert key is not None and key.get_secret_value() == "from-an-inline-vault"
    # no password: the value is unknown (locked), not a YAML error
    locked = open_site(str(root))
    assert locked.secrets_locked
    assert locked.hosts["gpu1"].config.deploykit_s3_fqdn == "s3.fleet.test"


def test_a_wrong_password_for_an_inline_vault_names_file_and_key(
        make_inventory: InventoryFactory, tmp_path: Path) -> None:
    root = make_inventory(BASE_HOSTS)
    indented = "\n".join("  " + line for line in _encrypt_string("x").splitlines())
    (root / "group_vars" / "all.yml").write_text(
        f"deploykit_s3_secret_key: !vault |\n{indented}\n")
    wrong = tmp_path / "wrong"
    wrong.write_text("not-the-password\n")
    with pytest.raises(InventoryError) as caught:
        open_site(str(root), wrong)
    text = str(caught.value)
    assert "all.yml" in text and "deploykit_s3_secret_key" in text, text


def test_an_executable_vault_password_file_is_a_password_script(
        make_inventory: InventoryFactory, tmp_path: Path) -> None:
    from tests.conftest import encrypt_vault

    root = make_inventory(BASE_HOSTS, all={
        "deploykit_s3_secret_key": "{{ vault_deploykit_s3_secret_key }}"},
        files={"group_vars/all/vault.yml":
               encrypt_vault(yaml.safe_dump({"vault_deploykit_s3_secret_key": "scripted"}))})
    script = tmp_path / "vault-pass.sh"
    script.write_text(f"#!/bin/sh\necho {VAULT_PASSWORD}\n")
    script.chmod(0o700)
    key = open_site(str(root), script).hosts["gpu1"].config.deploykit_s3_secret_key
    assert key is not None and key.get_secret_value() == "scripted"
    failing = tmp_path / "failing.sh"
    failing.write_text("#!/bin/sh\nexit 4\n")
    failing.chmod(0o700)
    with pytest.raises(InventoryError, match="exited 4"):
        open_site(str(root), failing)


def test_a_password_script_is_read_like_a_bounded_file(tmp_path: Path) -> None:
    """A script that prints without end or never exits is killed at the bound, not read
    into memory or waited on for ever; its output is never echoed."""
    import time

    from deploy_kit.config.vault import script_output

    endless = tmp_path / "endless.sh"
    endless.write_text("#!/bin/sh\nwhile :; do echo Corpus-Secret-Value-4711; done\n")
    endless.chmod(0o700)
    with pytest.raises(ValueError, match="more than 65536 bytes") as caught:
        script_output(endless)
    assert "Corpus-Secret" not in str(caught.value)
    hanging = tmp_path / "hanging.sh"
    hanging.write_text("#!/bin/sh\necho partial\nexec sleep 600\n")
    hanging.chmod(0o700)
    start = time.monotonic()
    with pytest.raises(ValueError, match="did not finish within 1 s"):
        script_output(hanging, timeout=1)
    assert time.monotonic() - start < 10
    fine = tmp_path / "fine.sh"
    fine.write_text("#!/bin/sh\necho pw\n")
    fine.chmod(0o700)
    assert script_output(fine, timeout=5) == "pw\n"


def test_links_may_point_inside_the_repository_but_not_out_of_it(tmp_path: Path) -> None:
    """inventories/<env>/group_vars linked to shared vars in the same repository is common
    and works; the same link in an inventory outside any repository is refused unread."""
    import yaml

    from deploy_kit.core.errors import InventoryError
    from deploy_kit.ops.site import open_site
    from tests.conftest import BASE_HOSTS

    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / "shared").mkdir()
    (repo / "shared" / "all.yml").write_text("deploykit_s3_fqdn: s3.shared.example\n")
    inventory = repo / "inventories" / "prod"
    (inventory / "group_vars").mkdir(parents=True)
    (inventory / "hosts.yml").write_text(yaml.safe_dump(BASE_HOSTS))
    (inventory / "group_vars" / "all.yml").symlink_to("../../../shared/all.yml")
    assert open_site(str(inventory)).settings.deploykit_s3_fqdn == "s3.shared.example"

    (repo / ".git").rmdir()  # the same tree, no repository: only the inventory is trusted
    with pytest.raises(InventoryError) as caught:
        open_site(str(inventory))
    assert "outside the inventory" in str(caught.value)
