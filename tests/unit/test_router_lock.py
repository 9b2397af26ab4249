"""The router's shipped hash-pinned lock, its accessor, and tools/router_lock.py's pure parts."""

from __future__ import annotations

import importlib.util
import re
import sys
from types import ModuleType

import pytest

from deploy_kit.core.errors import DeployKitError
from deploy_kit.core.exit_codes import ExitCode
from deploy_kit.core.router_lock import (
    RouterLockError,
    lock_path,
    lock_text,
    parse_lock,
    versions,
)
from tests.conftest import REPO

# PyPI's digests of vllm-router 0.1.17's two wheels (cp38-abi3 manylinux_2_28)
X86_64 = "85c96bea4d573a49b5a8ae4c72ee3dfe733aba26b6f1ff1256e6142f1f42694d"
AARCH64 = "1ec4d5ce14c19431cc84e36238507dff89020ab024d99f042f091f5e9f2c895a"
# vllm-router 0.1.17's Requires-Dist
DIRECT = {"setproctitle", "aiohttp", "orjson", "uvicorn", "fastapi", "requests"}


def test_the_shipped_lock_pins_everything_by_hash() -> None:
    locked = parse_lock(lock_text("0.1.17"))
    names = [r.name for r in locked]
    assert names == sorted(names) and len(set(zip(names, [r.marker for r in locked],
                                                  strict=True))) == len(locked)
    for requirement in locked:
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", requirement.name), requirement
        assert re.fullmatch(r"[0-9][0-9A-Za-z.+!]*", requirement.version), requirement
        assert requirement.hashes and len(set(requirement.hashes)) == len(requirement.hashes)
        assert list(requirement.hashes) == sorted(requirement.hashes)
    router = [r for r in locked if r.name == "vllm-router"]
    assert [r.version for r in router] == ["0.1.17"]
    assert {X86_64, AARCH64} <= set(router[0].hashes)
    assert set(names) >= DIRECT


def test_the_lock_says_how_it_was_made() -> None:
    text = lock_text("0.1.17")
    assert "tools/router_lock.py --version 0.1.17" in text
    assert "pip install --require-hashes --no-deps" in text


def test_the_lock_ships_as_package_data() -> None:
    assert "0.1.17" in versions()
    path = lock_path("0.1.17")
    assert path == REPO / "deploy_kit" / "data" / "router" / "vllm-router-0.1.17.lock"
    pyproject = (REPO / "pyproject.toml").read_text()
    assert '"data/router/*.lock"' in pyproject


@pytest.mark.parametrize("version", ["0.0.1", "../compat", "0.1.17/../../x", ""])
def test_an_unknown_version_is_refused_with_the_shipped_ones(version: str) -> None:
    with pytest.raises(RouterLockError) as caught:
        lock_path(version)
    assert isinstance(caught.value, DeployKitError)
    assert caught.value.exit_code == ExitCode.INVALID_INVENTORY
    assert "0.1.17" in caught.value.message and caught.value.hint
    with pytest.raises(RouterLockError):
        lock_text(version)


def test_parse_reads_markers_continuations_and_comments() -> None:
    text = ("# header\n\n"
            "b-pkg==2.0 ; python_version == \"3.11\" \\\n"
            f"    --hash=sha256:{'a' * 64} \\\n"
            f"    --hash=sha256:{'b' * 64}\n"
            f"c==1.0 --hash=sha256:{'c' * 64}\n")
    first, second = parse_lock(text)
    assert (first.name, first.version, first.marker) == ("b-pkg", "2.0",
                                                         'python_version == "3.11"')
    assert first.hashes == ("a" * 64, "b" * 64) and first.pin == "b-pkg==2.0"
    assert (second.name, second.marker, second.hashes) == ("c", None, ("c" * 64,))


@pytest.mark.parametrize("line", [
    f"a>=1.0 --hash=sha256:{'a' * 64}",
    f"a --hash=sha256:{'a' * 64}",
    "a==1.0",
    f"a==1.0 --hash=md5:{'a' * 32}",
    f"a==1.0 --index-url=https://example.test --hash=sha256:{'a' * 64}",
])
def test_parse_refuses_what_require_hashes_would(line: str) -> None:
    with pytest.raises(RouterLockError):
        parse_lock(line + "\n")


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("router_lock_tool",
                                                  REPO / "tools" / "router_lock.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_tool_markers_select_exactly_the_targets() -> None:
    tool = _tool()
    t = tool.Target
    every = frozenset(tool.TARGETS)
    assert tool.marker_for(every) is None
    assert tool.marker_for(frozenset({t("3.11", "x86_64"), t("3.11", "aarch64")})) == \
        'python_version == "3.11"'
    assert tool.marker_for(frozenset({t("3.11", "aarch64"), t("3.12", "aarch64")})) == \
        'platform_machine == "aarch64"'
    assert tool.marker_for(frozenset({t("3.12", "x86_64")})) == \
        'python_version == "3.12" and platform_machine == "x86_64"'
    odd = tool.marker_for(frozenset({t("3.11", "x86_64"), t("3.12", "aarch64")}))
    assert odd == ('(python_version == "3.11" and platform_machine == "x86_64") or '
                   '(python_version == "3.12" and platform_machine == "aarch64")')


def test_tool_pins_split_a_package_by_target() -> None:
    tool = _tool()
    t = tool.Target
    resolved = {target: {"a": ("1.0", ""), "vllm-router": ("0.1.17", "")}
                for target in tool.TARGETS}
    resolved[t("3.12", "x86_64")]["a"] = ("2.0", "")
    resolved[t("3.12", "aarch64")]["a"] = ("2.0", "")
    pins = {(p.name, p.version): p.marker for p in tool.pins(resolved)}
    assert pins == {("a", "1.0"): 'python_version == "3.11"',
                    ("a", "2.0"): 'python_version == "3.12"', ("vllm-router", "0.1.17"): None}


@pytest.mark.parametrize(("filename", "installs"), [
    ("vllm_router-0.1.17-cp38-abi3-manylinux_2_28_x86_64.whl", True),
    ("vllm_router-0.1.17-cp38-abi3-manylinux_2_28_aarch64.whl", True),
    ("x-1-py3-none-any.whl", True),
    ("x-1-cp312-cp312-manylinux_2_17_aarch64.manylinux2014_aarch64.whl", True),
    ("x-1-cp313-cp313-manylinux_2_17_x86_64.whl", False),
    ("x-1-cp311-cp311-musllinux_1_2_x86_64.whl", False),
    ("x-1-cp311-cp311-win_amd64.whl", False),
    ("x-1-cp311-cp311-macosx_11_0_arm64.whl", False),
    ("x-1-cp311-cp311-manylinux_2_17_ppc64le.whl", False),
    ("x-1-py2-none-any.whl", False),
])
def test_tool_keeps_the_wheels_a_target_installs(filename: str, installs: bool) -> None:
    tool = _tool()
    assert tool.wheel_installs_on(filename, frozenset(tool.TARGETS)) is installs
