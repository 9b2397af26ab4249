"""Every variable a role reads is deploykit's: owned (a deploykit prefix, or `_` for what
the render computes), held to the path rules when it names a path, and refused in `-e`,
which also decrypts a vaulted vars file and never quotes a value it refuses."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from deploy_kit.ansible.extra_vars import RUN_VARS, check_extra_vars, check_inline_vars
from deploy_kit.config.models import OWNED_PREFIXES, HostConfig
from deploy_kit.config.rules_paths import (
    BINARY_SOURCES,
    CONTROLLER_DIRS,
    DESTRUCTIVE_DIRS,
    PRIVATE_DIRS,
    RECORD_KEY,
)
from deploy_kit.config.vault import from_password_file
from deploy_kit.core.errors import InventoryError
from deploy_kit.ops.site import open_site
from tests.cli import run_cli
from tests.conftest import REPO, InventoryFactory, encrypt_vault, vault_password_file

PATH_NAME = re.compile(r"(_dir|_path|_venv|_src|_file|_root)$")


def role_variables() -> dict[str, set[str]]:
    """Every variable the roles read from outside: their defaults and their argument specs'
    options, with the roles that read each."""
    found: dict[str, set[str]] = {}
    for role in sorted((REPO / "roles").iterdir()):
        defaults = role / "defaults" / "main.yml"
        if defaults.is_file():
            for name in yaml.safe_load(defaults.read_text()) or {}:
                found.setdefault(str(name), set()).add(role.name)
        specs = role / "meta" / "argument_specs.yml"
        if specs.is_file():
            for entry in yaml.safe_load(specs.read_text())["argument_specs"].values():
                for name in entry.get("options") or {}:
                    found.setdefault(str(name), set()).add(role.name)
    return found


def path_ruled() -> set[str]:
    return {*PRIVATE_DIRS, *CONTROLLER_DIRS, RECORD_KEY, *BINARY_SOURCES, *RUN_VARS}


def test_every_role_variable_is_owned_path_ruled_and_refused_in_extra_vars() -> None:
    found = role_variables()
    assert {"vllm_venv", "_deploykit_site", "deploykit_render_dir"} <= set(found)  # the scan
    unowned = {k: sorted(v) for k, v in found.items()
               if not k.startswith((*OWNED_PREFIXES, "_"))}
    assert not unowned, f"rename into deploykit's space: {unowned}"
    paths = {k for k in found if PATH_NAME.search(k) and not k.startswith("_")}
    assert "vllm_wheel_staging_dir" in paths
    assert not paths - path_ruled(), f"add to config/rules_paths.py: {paths - path_ruled()}"
    refused = []
    for name in found:
        try:
            check_inline_vars((f"{name}=/",))
        except InventoryError as exc:
            assert [p.key for p in exc.problems] == [name]
            refused.append(name)
    assert sorted(refused) == sorted(found)


def test_the_wheel_staging_directory_is_a_setting_under_the_path_rules(
        make_inventory: InventoryFactory) -> None:
    assert "vllm_wheel_staging_dir" in HostConfig.model_fields
    assert "vllm_wheel_staging_dir" in DESTRUCTIVE_DIRS  # deleted whole: nothing else inside
    for bad in ("/", "/etc", "/var/cache", "/opt/vllm"):
        with pytest.raises(InventoryError) as caught:
            open_site(str(make_inventory(vllm={"vllm_wheel_staging_dir": bad})))
        assert any(p.key == "vllm_wheel_staging_dir" for p in caught.value.problems), bad
    site = open_site(str(make_inventory(vllm={"vllm_wheel_staging_dir":
                                              "/var/cache/deploykit-wheels-2"})))
    assert site.hosts["gpu1"].config.vllm_wheel_staging_dir == "/var/cache/deploykit-wheels-2"
    # the role has no default of its own: settings.json (the model) is its one default
    assert not (REPO / "roles" / "serving" / "defaults" / "main.yml").exists() or \
        "staging" not in (REPO / "roles" / "serving" / "defaults" / "main.yml").read_text()


@pytest.mark.parametrize("extra", [
    "_deploykit_settings_loaded=true", '{"_deploykit_site": {"dns_servers": []}}',
    "__serving_env_installed=x", "_vllm_secret_env_path=/etc/shadow",
    "serving_env_staging_dir=/ _deploykit_files=[]"])
def test_role_internal_names_are_refused_in_extra_vars(extra: str) -> None:
    with pytest.raises(InventoryError) as caught:
        check_inline_vars((extra,))
    keys = [p.key for p in caught.value.problems]
    assert keys and all(k.startswith("_") for k in keys)
    assert "roles keep for themselves" in str(caught.value)


def test_ansible_knobs_still_pass() -> None:
    check_inline_vars(("ansible_user=root forks=3", '{"ansible_port": 2222}'))


SECRET = "hunter2-Sup3rSecret"


@pytest.mark.parametrize("text", [
    f'{{"vllm_api_key": "{SECRET}"',  # unclosed mapping
    f'{{a: "{SECRET}\\q"}}',  # a bad escape
    f"{{a: [{SECRET}, {{b: }}",
    f"{SECRET}",  # neither pairs nor a mapping
    f"{{ {SECRET}: [1, 2}}",
])
def test_a_malformed_inline_value_is_never_quoted(text: str) -> None:
    with pytest.raises(InventoryError) as caught:
        check_inline_vars(("forks=3", text))
    message = str(caught.value)
    assert SECRET not in message and "--extra-vars #2" in message


def test_a_malformed_vars_file_is_never_quoted(tmp_path: Path) -> None:
    path = tmp_path / "vars.yml"
    path.write_text(f"ansible_user: root\nvllm_api_key: '{SECRET}\nnext: [\n")
    with pytest.raises(InventoryError) as caught:
        check_extra_vars((path,))
    assert SECRET not in str(caught.value) and "line" in str(caught.value)


def _vaulted(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "vaulted.yml"
    path.write_text(encrypt_vault(text))
    return path


def test_a_vaulted_vars_file_is_decrypted_with_the_runs_secrets(tmp_path: Path) -> None:
    secrets = from_password_file(vault_password_file(tmp_path))
    check_extra_vars((_vaulted(tmp_path, "ansible_user: root\n"),), secrets)  # passes
    with pytest.raises(InventoryError) as caught:  # what it sets is checked as plain text
        check_extra_vars((_vaulted(tmp_path, "_deploykit_settings_loaded: true\n"),), secrets)
    assert [p.key for p in caught.value.problems] == ["_deploykit_settings_loaded"]
    with pytest.raises(InventoryError, match="no vault secret was given"):
        check_extra_vars((_vaulted(tmp_path, "ansible_user: root\n"),), from_password_file(None))
    # not known yet (down's check before its prompt): left to the check with the secrets
    check_extra_vars((_vaulted(tmp_path, "lmcache_chunk_size: 1\n"),), None)


def test_up_reads_a_vaulted_vars_file_as_ansible_playbook_does(
        tmp_path: Path, make_inventory: InventoryFactory) -> None:
    root = make_inventory()
    password = vault_password_file(tmp_path)
    plain = _vaulted(tmp_path, "ansible_user: root\n")
    ok = run_cli("up", "-i", str(root), "--vault-password-file", str(password),
                 "--print-command", "-e", f"@{plain}", cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr[-800:]
    bad = tmp_path / "bad.yml"
    bad.write_text(encrypt_vault("lmcache_chunk_size: 512\n"))
    refused = run_cli("up", "-i", str(root), "--vault-password-file", str(password),
                      "--print-command", "-e", f"@{bad}", cwd=tmp_path)
    assert refused.returncode == 3 and "lmcache_chunk_size" in refused.stderr, refused.stderr
