"""Every `deploykit secrets …` command deploykit prints (the CLI's warnings and hints, the
roles' preflight messages, the rotation playbooks' failure messages) is a command that works:
run as printed (rotations with --check), none is a usage error. The `-e @FILE` the roles
name is the file deploykit writes. `rotate gossip --check` needs no stored next key."""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from deploy_kit.ops import secret_files, secrets_store
from deploy_kit.ops.site import open_site
from tests.cli import run_cli
from tests.conftest import REPO, InventoryFactory
from tests.unit.test_secrets_store import fake_runner  # noqa: F401 (the fixture)
from tests.unit.test_vault import password_file

COMMAND = re.compile(r"`(deploykit secrets [^`]+)`")
EXTRA_VARS = re.compile(r"`-e @([^`]+)`")


def printed_hints(make_inventory: InventoryFactory, tmp_path: Path) -> tuple[Path, set[str]]:
    """The secrets commands deploykit prints across the situations that print one."""
    root = make_inventory()
    pw = str(password_file(tmp_path))
    runs = {"DEPLOYKIT_RUNS_DIR": str(tmp_path / "runs")}
    out: list[str] = []

    def say(*args: str) -> None:
        result = run_cli(*args, env=runs)
        out.append(result.stdout + result.stderr)

    say("validate", "-i", str(root))  # no vault: the warning and its fix
    say("up", "-i", str(root), "--print-command")  # nothing generated yet
    secrets_store.ensure(open_site(str(root)))
    say("validate", "-i", str(root), "--vault-password-file", pw)  # a store to move
    say("secrets", "rotate", "-i", str(root), "vllm-api-key", "--yes")  # the --finish step
    secrets_store.ensure(open_site(str(root), Path(pw)))  # the local store still wins
    (root / secrets_store.VAULT_FILE).write_text("")  # a vault file beside a left-over store
    say("validate", "-i", str(root), "--vault-password-file", pw)
    (root / secrets_store.VAULT_FILE).unlink()
    linked = root / ".deploykit-secrets" / "secrets.yml"
    linked.unlink()
    linked.symlink_to(tmp_path / "nowhere")  # the refusal's own fix
    say("up", "-i", str(root))
    linked.unlink()
    opted_out = tmp_path / "opted-out"
    shutil.copytree(root, opted_out, ignore=shutil.ignore_patterns(".deploykit*"))
    (opted_out / "group_vars" / "all.yml").write_text(yaml.safe_dump(
        {"consul_acl_enabled": False, "consul_gossip_encryption": False}))
    say("secrets", "rotate", "-i", str(opted_out), "gossip", "--yes")  # nothing to rotate
    return root, {c for text in out for c in COMMAND.findall(text)}


def printed_text(path: Path) -> str:
    """A task file's text without its comments (never printed), folded onto one line."""
    lines = [x for x in path.read_text().splitlines() if not x.lstrip().startswith("#")]
    return " ".join(" ".join(lines).split())


def yaml_hints(root: Path) -> set[str]:
    """The commands the roles' and playbooks' messages print, rendered as Ansible would."""
    import jinja2

    found: set[str] = set()
    for path in [*REPO.glob("roles/*/tasks/*.yml"), *REPO.glob("playbooks/*.yml")]:
        for command in COMMAND.findall(printed_text(path)):
            for kind in ("tokens", "gossip"):
                found.add(jinja2.Template(command).render(
                    inventory_dir=str(root), deploykit_rotate_consul=kind))
    return found


def works(command: str) -> None:
    argv = shlex.split(command)
    assert argv[0] == "deploykit", command
    args = argv[1:]
    if "rotate" in args:
        args.append("--check")  # what it would do; --yes aside, exactly as printed
    result = run_cli(*args)
    assert result.returncode != 2, (command, result.stderr)
    for usage in ("Missing option", "No such option", "Usage:", "Got unexpected"):
        assert usage not in result.stderr, (command, result.stderr)


def test_every_printed_secrets_command_works(make_inventory: InventoryFactory, tmp_path: Path,
                                             fake_runner: Any) -> None:  # noqa: F811
    root, printed = printed_hints(make_inventory, tmp_path)
    assert {c.split(" -i")[0] for c in printed} >= {
        "deploykit secrets move", "deploykit secrets generate", "deploykit secrets list",
        "deploykit secrets rotate"}, printed
    from_yaml = yaml_hints(root)
    assert len(from_yaml) >= 4, from_yaml  # preflight x2, rotate s3 x2, rotate consul x2
    for command in sorted(printed | from_yaml):
        assert " -i " in f" {command} ", command  # the site is always named
        works(command)


def test_the_roles_name_the_files_deploykit_writes() -> None:
    named: set[str] = set()
    for path in REPO.glob("roles/*/tasks/*.yml"):
        named |= set(EXTRA_VARS.findall(printed_text(path)))
    assert named == {f"{{{{ inventory_dir }}}}/{secret_files.VAULT_FILE}",
                     f"{{{{ inventory_dir }}}}/{secret_files.STORE_DIR}/"
                     f"{secret_files.STORE_FILE}"}, named


def test_rotate_consul_runs_in_check_mode_without_a_next_gossip_key() -> None:
    """`secrets rotate gossip --check` stores no next key: every task of the playbook that
    reads consul_gossip_key_next falls back in check mode, and a real run without one stops
    at an assert that says why (no no_log hiding the cause)."""
    plays = yaml.safe_load((REPO / "playbooks" / "rotate_consul.yml").read_text())
    tasks = [t for play in plays for t in play.get("tasks", [])]
    readers = [t for t in tasks if "consul_gossip_key_next" in yaml.safe_dump(
        {k: v for k, v in t.items() if k not in ("name", "when", "ansible.builtin.assert")})]
    assert readers  # the install of the next key (the prune run reads the stored values)
    for task in readers:
        module = next(v for k, v in task.items() if k.startswith("deploykit.kvcache."))
        assert "consul_gossip_key_next | default(" in module["key"], task["name"]
    (guard,) = [t for t in tasks if "consul_gossip_key_next is defined"
                in str(t.get("ansible.builtin.assert", {}).get("that"))]
    assert "ansible_check_mode" in guard["ansible.builtin.assert"]["that"]
    assert not guard.get("no_log")


@pytest.mark.parametrize("kind", ["gossip", "consul-tokens", "vllm-api-key"])
def test_rotate_check_runs_for_every_kind_and_writes_nothing(
        make_inventory: InventoryFactory, tmp_path: Path, fake_runner: Any,  # noqa: F811
        kind: str) -> None:
    root = make_inventory()
    secrets_store.ensure(open_site(str(root)))
    before = secret_files.read_local(root / ".deploykit-secrets")
    result = run_cli("secrets", "rotate", "-i", str(root), kind, "--check",
                     env={"DEPLOYKIT_RUNS_DIR": str(tmp_path / "runs")})
    assert result.returncode == 0, result.stderr
    assert len(fake_runner) == 1 and "--check" in fake_runner[0]["argv"]
    assert secret_files.read_local(root / ".deploykit-secrets") == before
