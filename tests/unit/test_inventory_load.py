import copy
from pathlib import Path

import pytest
import yaml

from deploy_kit.config.load import load_inventory, resolve_inventory_path
from deploy_kit.core.errors import InventoryError
from deploy_kit.ops.site import open_site
from tests.conftest import BASE_HOSTS, InventoryFactory


def test_precedence_all_then_group_then_host(make_inventory: InventoryFactory) -> None:
    hosts = copy.deepcopy(BASE_HOSTS)
    hosts["all"]["children"]["vllm"]["hosts"]["gpu2"]["lmcache_chunk_size"] = 1024
    root = make_inventory(hosts, all={"lmcache_chunk_size": 128, "vllm_port": 9000},
                          vllm={"lmcache_chunk_size": 512})
    raw = load_inventory(root)
    assert raw.hosts["gpu1"].vars["lmcache_chunk_size"] == 512
    assert raw.hosts["gpu2"].vars["lmcache_chunk_size"] == 1024
    assert raw.hosts["gpu1"].vars["vllm_port"] == 9000
    assert raw.hosts["gpu1"].sources["lmcache_chunk_size"].endswith("group_vars/vllm.yml")
    assert raw.hosts["gpu2"].sources["lmcache_chunk_size"].endswith("hosts.yml")
    assert raw.hosts["rgw1"].vars["lmcache_chunk_size"] == 128


def test_group_vars_directory_and_host_vars(make_inventory: InventoryFactory) -> None:
    root = make_inventory(files={"group_vars/all/a.yml": "vllm_port: 1\n",
                                 "group_vars/all/b.yml": "vllm_port: 2\n",
                                 "host_vars/gpu1.yml": "vllm_port: 3\n"})
    raw = load_inventory(root)
    assert raw.hosts["gpu2"].vars["vllm_port"] == 2  # files in a directory load sorted
    assert raw.hosts["gpu1"].vars["vllm_port"] == 3


def test_nested_children_groups(make_inventory: InventoryFactory) -> None:
    hosts = copy.deepcopy(BASE_HOSTS)
    hosts["all"]["children"]["vllm"] = {"children": {"fleet_a": {
        "hosts": {"gpu9": {"vllm_accelerator": "gaudi3"}}, "vars": {"vllm_port": 8123}}}}
    raw = load_inventory(make_inventory(hosts))
    assert raw.hosts["gpu9"].groups == {"vllm", "fleet_a"}
    assert raw.hosts["gpu9"].vars["vllm_port"] == 8123


def test_env_reference_resolves_secret(make_inventory: InventoryFactory,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DK_TEST_SECRET", "s3cr3t-value")
    root = make_inventory(all={"deploykit_s3_secret_key": "{{ lookup('env', 'DK_TEST_SECRET') }}"})
    site = open_site(str(root))
    key = site.hosts["gpu1"].config.deploykit_s3_secret_key
    assert key is not None and key.get_secret_value() == "s3cr3t-value"
    assert "s3cr3t-value" not in repr(site.hosts["gpu1"].config)


def test_encrypted_vault_is_decrypted_with_password(make_inventory: InventoryFactory,
                                                    tmp_path: Path) -> None:
    from ansible.parsing.vault import VaultLib, VaultSecret

    vault = VaultLib([("default", VaultSecret(b"pw"))])
    plain = yaml.safe_dump({"vault_deploykit_s3_secret_key": "from-the-vault"})
    encrypted = vault.encrypt(plain).decode()
    root = make_inventory(files={"group_vars/all/vault.yml": encrypted},
                          all={"deploykit_s3_secret_key": "{{ vault_deploykit_s3_secret_key }}"})
    password = tmp_path / "pw"
    password.write_text("pw\n")
    site = open_site(str(root), password)
    key = site.hosts["gpu1"].config.deploykit_s3_secret_key
    assert key is not None and key.get_secret_value() == "from-the-vault"
    locked = open_site(str(root))  # no password: secret unknown, site still valid
    assert locked.secrets_locked and locked.hosts["gpu1"].config.deploykit_s3_secret_key is None
    bad = tmp_path / "bad"
    bad.write_text("nope")
    with pytest.raises(InventoryError, match="cannot decrypt"):
        open_site(str(root), bad)


def test_inventory_name_resolves_under_project(tmp_path: Path) -> None:
    (tmp_path / "inventory" / "prod").mkdir(parents=True)
    assert resolve_inventory_path("prod", tmp_path) == tmp_path / "inventory" / "prod"
    with pytest.raises(InventoryError, match="no such inventory") as named:
        resolve_inventory_path("nope", tmp_path)
    assert "create inventory/nope/hosts.yml" in str(named.value)
    with pytest.raises(InventoryError) as path:
        resolve_inventory_path(str(tmp_path / "sites" / "nope"), tmp_path)
    assert f"create {tmp_path}/sites/nope/hosts.yml" in str(path.value)


def test_an_installed_wheel_finds_the_sites_inventory_before_its_bundled_ones(
        tmp_path: Path) -> None:
    bundled, local = tmp_path / "content", tmp_path / "site" / "inventory"
    for root in (bundled / "inventory", local):
        (root / "example").mkdir(parents=True)
    (local / "lab").mkdir()
    assert resolve_inventory_path("lab", bundled, local) == local / "lab"
    assert resolve_inventory_path("example", bundled, local) == local / "example"
    (local / "example").rmdir()
    assert resolve_inventory_path("example", bundled, local) == bundled / "inventory" / "example"


def test_missing_hosts_file_and_bad_yaml(tmp_path: Path) -> None:
    with pytest.raises(InventoryError, match=r"hosts\.yml: missing"):
        load_inventory(tmp_path)
    (tmp_path / "hosts.yml").write_text("all: [unclosed\n")
    with pytest.raises(InventoryError, match="not valid YAML"):
        load_inventory(tmp_path)
