"""The local store is trusted only as deploykit wrote it: its directory is never followed
through a link nor used when others may write it or it is another user's, its file is a
regular 0600 file of this user's opened without following links, and its content is one
mapping of known names to values the vault's rules accept. Every refusal is one line naming
the file and key, exit 3, nothing written, no secret quoted. A vault password script is
killed with everything it started."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from deploy_kit.config import site_secrets
from deploy_kit.config.vault import VaultIdentity, read_password, script_output
from deploy_kit.core.errors import InventoryError
from deploy_kit.ops import secret_files, secrets_store
from deploy_kit.ops.site import open_site
from tests.cli import run_cli
from tests.conftest import InventoryFactory
from tests.unit.test_check_mode_writes_nothing import tree_digest
from tests.unit.test_secrets_store import fake_runner  # noqa: F401 (the fixture)

STORE = ".deploykit-secrets"


def good_values() -> dict[str, str]:
    return {n: site_secrets.generate(n) for n in site_secrets.GENERATED}


def write_store(root: Path, text: str, mode: int = 0o600) -> Path:
    directory = root / STORE
    directory.mkdir(mode=0o700, exist_ok=True)
    directory.chmod(0o700)
    path = directory / "secrets.yml"
    path.write_text(text)
    path.chmod(mode)
    return path


def refused(root: Path, *args: str, env: dict[str, str] | None = None) -> str:
    """`up` (and verify, which reads the store) refuse with exit 3 and touch nothing."""
    before = tree_digest(root)
    result = run_cli("up", "-i", str(root), *args, env=env)
    assert result.returncode == 3, (result.returncode, result.stderr)
    assert tree_digest(root) == before
    return result.stderr


def test_a_linked_store_directory_is_never_followed_or_written(
        make_inventory: InventoryFactory, tmp_path: Path, fake_runner: Any) -> None:  # noqa: F811
    root = make_inventory()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    (root / STORE).symlink_to(elsewhere)
    stderr = refused(root, env={"DEPLOYKIT_RUNS_DIR": str(tmp_path / "runs")})
    assert f"{root / STORE}: {STORE}: is a link or not a directory" in stderr
    assert list(elsewhere.iterdir()) == [] and not fake_runner
    # the same with a store in the link's target: not read either
    secret_files.write_local(elsewhere, good_values())
    assert "is a link" in run_cli("verify", "-i", str(root)).stderr
    assert "is a link" in run_cli("secrets", "generate", "-i", str(root)).stderr


def test_a_store_directory_others_may_write_is_refused(
        make_inventory: InventoryFactory) -> None:
    root = make_inventory()
    write_store(root, secret_files.document(good_values()))
    (root / STORE).chmod(0o777)
    stderr = refused(root)
    assert "mode 0777, not 0700" in stderr and "chmod 700" in stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
def test_a_store_directory_or_file_of_another_user_is_refused(
        make_inventory: InventoryFactory) -> None:
    root = make_inventory()
    path = write_store(root, secret_files.document(good_values()))
    os.chown(root / STORE, 4242, 4242)
    assert "owned by another user (uid 4242)" in refused(root)
    os.chown(root / STORE, 0, 0)
    os.chown(path, 4242, 4242)
    assert "secrets.yml: deploykit_generated_secrets: is owned by another user" in refused(root)


def test_a_fifo_or_a_linked_file_is_refused_without_blocking(
        make_inventory: InventoryFactory, tmp_path: Path) -> None:
    root = make_inventory()
    path = write_store(root, "")
    path.unlink()
    os.mkfifo(path, 0o600)
    started = time.monotonic()
    assert "is not a regular file" in refused(root)
    assert time.monotonic() - started < 20
    path.unlink()
    target = tmp_path / "target.yml"
    target.write_text(secret_files.document(good_values()))
    target.chmod(0o600)
    path.symlink_to(target)
    assert "secrets.yml: deploykit_generated_secrets: is a link" in refused(root)


@pytest.mark.parametrize("doc, key, why", [
    ({"deploykit_generated_secrets": {}, "ansible_ssh_common_args": "-o ProxyCommand=x"},
     "ansible_ssh_common_args", "is not allowed"),
    ({"deploykit_generated_secrets": {"ansible_become_password": "x" * 20}},
     "deploykit_generated_secrets.ansible_become_password", "is not a secret deploykit"),
    ({"deploykit_generated_secrets": {"consul_gossip_key": "not-base64-at-all"}},
     "deploykit_generated_secrets.consul_gossip_key", "is not 32 bytes of base64"),
    ({"deploykit_generated_secrets": {"consul_acl_agent_token": "not-a-uuid"}},
     "deploykit_generated_secrets.consul_acl_agent_token", "is not a UUID"),
    ({"deploykit_generated_secrets": {"vllm_api_key": "abcdefghijklmnop\nExecStartPre=/x"}},
     "deploykit_generated_secrets.vllm_api_key", "holds a control character or line break"),
    ({"deploykit_generated_secrets": {"vllm_api_key_next": "-" + "a" * 30}},
     "deploykit_generated_secrets.vllm_api_key_next", "starts with '-'"),
    ({"deploykit_generated_secrets": ["a list"]}, "deploykit_generated_secrets",
     "is not a mapping"),
    ({"other": 1}, "deploykit_generated_secrets", "is missing"),
])
def test_store_content_is_held_to_the_vault_rules(
        make_inventory: InventoryFactory, doc: Any, key: str, why: str) -> None:
    root = make_inventory()
    path = write_store(root, yaml.safe_dump(doc))
    stderr = refused(root)
    line = next(x for x in stderr.splitlines() if str(path) in x)
    assert f"{path}: {key}: {why}" in line, stderr
    for value in ("ProxyCommand", "ExecStartPre", "not-base64", "not-a-uuid"):
        assert value not in stderr


def test_a_yaml_error_names_the_line_and_never_quotes_the_secret(
        make_inventory: InventoryFactory) -> None:
    root = make_inventory()
    secret = "SuperSecretKeyValue0815abcdefgh"
    path = write_store(root, f"deploykit_generated_secrets:\n  vllm_api_key: [{secret}\n")
    for verb in ("up", "verify", "secrets"):
        result = run_cli(verb, "-i", str(root))
        assert result.returncode == 3, (verb, result.stderr)
        assert f"{path}: deploykit_generated_secrets: is not valid YAML (line" in result.stderr
        assert secret not in result.stdout + result.stderr and "Super" not in result.stderr


def test_a_stored_secret_copied_into_a_plain_setting_is_refused(
        make_inventory: InventoryFactory) -> None:
    root = make_inventory()
    values = good_values()
    write_store(root, secret_files.document(values))
    (root / "group_vars" / "vllm.yml").write_text(yaml.safe_dump(
        {"vllm_extra_env": {"MY_SETTING": values["vllm_api_key"]}}))  # a 0644 env file
    stderr = refused(root)
    assert "vllm_extra_env: holds the value of vllm_api_key" in stderr
    assert values["vllm_api_key"] not in stderr
    with pytest.raises(InventoryError, match="holds the value of vllm_api_key"):
        secrets_store.with_stored(open_site(str(root)))


def test_print_command_refuses_a_store_every_other_verb_refuses(
        make_inventory: InventoryFactory) -> None:
    root = make_inventory()
    write_store(root, secret_files.document(good_values()), mode=0o644)
    result = run_cli("up", "-i", str(root), "--print-command")
    assert result.returncode == 3 and "accessible to others (mode 0644)" in result.stderr
    assert "-e" not in result.stdout.split()
    (root / STORE / "secrets.yml").chmod(0o600)
    shown = run_cli("up", "-i", str(root), "--print-command")
    assert shown.returncode == 0 and str(root / STORE / "secrets.yml") in shown.stdout


def test_a_write_reaches_the_disk_with_its_directory(
        make_inventory: InventoryFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """fsync of the file, then of the directory after the rename (a crash right after
    `secrets generate` keeps the new store)."""
    import stat as stat_mod

    root = make_inventory()
    synced: list[str] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        synced.append("dir" if stat_mod.S_ISDIR(os.fstat(fd).st_mode) else "file")
        real(fd)

    replaced: list[str] = []
    real_replace = os.replace
    monkeypatch.setattr(secret_files.os, "fsync", fsync)
    monkeypatch.setattr(secret_files.os, "replace",
                        lambda *a, **k: (replaced.append(str(len(synced))), real_replace(*a, **k)))
    secrets_store.ensure(open_site(str(root)))
    assert synced == ["file", "dir"] and replaced == ["1"]  # the dir after the rename
    assert stat_mod.S_IMODE((root / STORE).stat().st_mode) == 0o700


# --- vault password scripts ---------------------------------------------------------------

def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is dead for this purpose (reaped by init once its parent went)
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[0] != "Z"
    except OSError:
        return False


def test_a_hanging_password_script_is_killed_with_everything_it_started(
        tmp_path: Path) -> None:
    """The script starts `sleep 600` in the background, a grandchild that holds stdout
    open, and hangs: the call returns at the limit and none of them outlives it."""
    pids = tmp_path / "pids"
    script = tmp_path / "vault-pass.sh"
    script.write_text(f"""#!/bin/sh
sleep 600 > /dev/null 2>&1 &
echo $! >> {pids}
sh -c 'echo $$ >> {pids}; sleep 600' &
echo $$ >> {pids}
echo password
sleep 600
""")
    script.chmod(0o700)
    started = time.monotonic()
    with pytest.raises(ValueError, match="did not finish within 2 s"):
        script_output(script, timeout=2)
    assert time.monotonic() - started < 10
    found = [int(x) for x in pids.read_text().split()]
    assert len(found) == 3
    deadline = time.monotonic() + 5
    while any(_alive(p) for p in found) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(p) for p in found), found


def test_a_script_that_exits_while_a_child_holds_stdout_returns_its_password(
        tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    script = tmp_path / "vault-pass.sh"
    script.write_text(f"#!/bin/sh\necho the-password\nsleep 600 &\necho $! > {pids}\nexit 0\n")
    script.chmod(0o700)
    started = time.monotonic()
    identity = VaultIdentity("default", str(script), "--vault-password-file")
    assert read_password(script, identity) == "the-password"
    assert time.monotonic() - started < 10  # not the 60 s limit: the child held the pipe
    child = int(pids.read_text())
    deadline = time.monotonic() + 5
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child)
