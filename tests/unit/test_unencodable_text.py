"""A lone surrogate (YAML's or JSON's "\\ud800", a byte that is not UTF-8 in argv) in any value
deploykit passes on is refused at the edge with one line, never an internal error."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from deploy_kit.config.rules_inventory import unencodable
from deploy_kit.core.text import first_unencodable
from tests.cli import run_cli
from tests.conftest import BASE_HOSTS, REPO, InventoryFactory

EXAMPLE = str(REPO / "inventory" / "example")
LONE = "\udcff"  # what Python makes of the byte 0xff in argv (surrogateescape)


def _one_line(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


@pytest.mark.parametrize("argv", [
    ["up", "-i", EXAMPLE, "--print-command", "-e", f"a={LONE}"],
    ["up", "-i", EXAMPLE, "--print-command", f"--limit={LONE}"],
    ["up", "-i", EXAMPLE, "--print-command", "--limit", f"gpu{LONE}"],
    ["up", "-i", EXAMPLE, "--print-command", "--tags", f"x{LONE}"],
    ["up", "-i", EXAMPLE, "--check", "--skip-tags", LONE],
    ["plan", "-i", f"/tmp/{LONE}"],
    ["validate", "-i", EXAMPLE, LONE],
    ["verify", "-i", EXAMPLE, "--limit", LONE],
])
def test_an_argument_that_is_not_utf8_exits_2_with_one_line(argv: list[str]) -> None:
    result = run_cli(*argv)
    assert result.returncode == 2, result
    lines = _one_line(result.stderr)
    assert len(lines) == 1 and "not valid UTF-8" in lines[0], result.stderr
    assert "\\udcff" not in lines[0] and result.stdout == ""


def _inventory(make_inventory: InventoryFactory, text: str) -> Path:
    root = make_inventory()
    with (root / "group_vars" / "vllm.yml").open("a") as handle:
        handle.write(text + "\n")
    return root


@pytest.mark.parametrize(("text", "key"), [
    ('my_var: "a\\ud800"', "my_var"),
    ('vllm_extra_env: {X: "a\\udc80"}', "vllm_extra_env.X"),
    ('lmcache_extra_config: {x: [ok, {y: "\\ud800"}]}', "lmcache_extra_config.x[1].y"),
    ('vllm_extra_args: ["--x=\\ud800"]', "vllm_extra_args[0]"),
    ('"vllm_k\\ud800": 1', "vllm_k\\ud800"),
])
@pytest.mark.parametrize("verb", ["validate", "plan", "render", "up"])
def test_an_inventory_value_that_is_not_text_is_an_inventory_problem(
        make_inventory: InventoryFactory, tmp_path: Path, text: str, key: str,
        verb: str) -> None:
    root = _inventory(make_inventory, text)
    extra = {"render": ["-o", str(tmp_path / "out")], "up": ["--check"]}.get(verb, [])
    result = run_cli(verb, "-i", str(root), *extra)
    assert result.returncode == 3, result
    problems = [line for line in result.stderr.splitlines() if " — " in line]
    assert len(problems) == 1 and f": {key}: " in problems[0], result.stderr
    assert "Unicode" in problems[0] and "internal error" not in result.stderr
    assert not (tmp_path / "out").exists()


def test_a_host_name_that_is_not_text_is_refused(make_inventory: InventoryFactory) -> None:
    root = make_inventory()
    hosts = yaml.safe_dump(BASE_HOSTS).replace("gpu2:", '"gpu\\ud8002":')
    (root / "hosts.yml").write_text(hosts)
    result = run_cli("validate", "-i", str(root))
    assert result.returncode == 3 and "internal error" not in result.stderr, result
    assert len([line for line in result.stderr.splitlines() if " — " in line]) == 1
    assert "gpu\\ud8002" in result.stderr  # named by its escape


@pytest.mark.parametrize("extra", ['{"a": {"b": "\\ud800"}}', '{"\\udc00": 1}'])
def test_an_extra_var_that_is_not_text_is_refused(extra: str) -> None:
    result = run_cli("up", "-i", EXAMPLE, "--print-command", "-e", extra)
    assert result.returncode == 3, result
    assert "not valid Unicode text" in result.stderr and "internal error" not in result.stderr


def test_a_shared_value_is_walked_once_and_named_for_every_host() -> None:
    shared = {"a": ["x", {"b": "\ud800"}]}
    seen: dict[int, str | None] = {}
    assert first_unencodable(shared, "", seen) == ".a[1].b"
    assert first_unencodable(shared, "", seen) == ".a[1].b"  # from the memo
    assert first_unencodable({"ok": ["é", "ü"]}, "", {}) is None


def test_the_example_is_text(make_inventory: InventoryFactory) -> None:
    from deploy_kit.config.load import load_inventory
    from deploy_kit.config.vault import VaultSecrets

    assert unencodable(load_inventory(REPO / "inventory" / "example", VaultSecrets())) == []
