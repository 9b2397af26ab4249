"""Staging the router's locked wheels offline (deploy_kit/ops/router_wheels.py), no network."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from deploy_kit.core.router_lock import parse_lock
from deploy_kit.ops import router_wheels
from deploy_kit.ops.router_wheels import (
    applicable,
    download_argv,
    platforms,
    stage,
    stage_name,
    staged,
    target_lock,
)
from deploy_kit.ops.wheelhouse import ARCHIVE_NAME, LOCK_NAME, WheelhouseError


def _values(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv) if a == flag]


def test_download_argv_fetches_only_the_hashed_wheels_for_the_target(tmp_path: Path) -> None:
    lock, dest = tmp_path / "target.lock", tmp_path / "out"
    argv = download_argv(lock, "3.11", "x86_64", dest)
    assert argv[:4] == [sys.executable, "-m", "pip", "download"]
    assert {"--no-deps", "--require-hashes", "--only-binary=:all:"} <= set(argv)
    assert _values(argv, "--python-version") == ["3.11"]
    assert _values(argv, "--implementation") == ["cp"]
    assert _values(argv, "--dest") == [str(dest)]
    assert _values(argv, "--requirement") == [str(lock)]
    tags = _values(argv, "--platform")
    assert tags == platforms("x86_64", "2.36") and tags[0] == "manylinux_2_36_x86_64"
    assert "--no-index" not in argv and "--find-links" not in argv


def test_platform_tags_per_machine() -> None:
    x86 = platforms("x86_64", "2.36")
    assert {"manylinux_2_28_x86_64", "manylinux_2_5_x86_64", "manylinux2014_x86_64",
            "manylinux1_x86_64"} <= set(x86) and "manylinux_2_37_x86_64" not in x86
    arm = platforms("aarch64", "2.36")
    assert arm[0] == "manylinux_2_36_aarch64" and arm[-1] == "manylinux2014_aarch64"
    assert "manylinux_2_16_aarch64" not in arm and not any("x86_64" in t for t in arm)
    assert "manylinux_2_36_aarch64" not in platforms("aarch64", "2.28")
    with pytest.raises(WheelhouseError):
        platforms("ppc64le")


def test_stage_names_follow_the_serving_wheelhouse() -> None:
    assert stage_name("0.1.17", "3.11", "x86_64") == "router-vllm-router-0.1.17-py311"
    assert stage_name("0.1.17", "3.12", "aarch64") == \
        "router-vllm-router-0.1.17-py312-aarch64"


def _fake_wheels(names: dict[str, bytes]) -> str:
    """A lock for fake wheel files (filename -> bytes), one requirement per file."""
    lines = []
    for filename, content in names.items():
        name, version = filename.split("-")[:2]
        lines.append(f"{name.replace('_', '-')}=={version} \\\n"
                     f"    --hash=sha256:{hashlib.sha256(content).hexdigest()}")
    return "# fake\n" + "\n".join(lines) + "\n"


WHEELS = {"vllm_router-0.1.17-cp38-abi3-manylinux_2_28_x86_64.whl": b"router",
          "orjson-3.13.0-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl": b"o"}


def test_markers_are_evaluated_for_the_target_not_the_controller() -> None:
    text = (f'a==1 ; python_version == "3.11" --hash=sha256:{"a" * 64}\n'
            f'a==2 ; python_version == "3.12" --hash=sha256:{"b" * 64}\n'
            f'b==1 ; platform_machine == "aarch64" --hash=sha256:{"c" * 64}\n'
            f'c==1 --hash=sha256:{"d" * 64}\n')
    locked = parse_lock(text)
    assert [r.pin for r in applicable(locked, "3.12", "aarch64")] == ["a==2", "b==1", "c==1"]
    assert [r.pin for r in applicable(locked, "3.11", "x86_64")] == ["a==1", "c==1"]
    assert target_lock(applicable(locked, "3.11", "x86_64")) == (
        f"a==1 --hash=sha256:{'a' * 64}\nc==1 --hash=sha256:{'d' * 64}\n")


@pytest.fixture
def fake_pip(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """stage() against a fake lock, with `pip download` writing the fake wheels."""
    text = _fake_wheels(WHEELS)
    monkeypatch.setattr(router_wheels, "lock_text", lambda version: text)
    calls: list[list[str]] = []

    def run(argv: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        calls.append(argv)
        dest = Path(_values(argv, "--dest")[0])
        for filename, content in WHEELS.items():
            (dest / filename).write_bytes(content)
        return subprocess.CompletedProcess(argv, 0, "", "")

    monkeypatch.setattr(router_wheels.subprocess, "run", run)
    return calls


def test_stage_builds_once_then_reuses(tmp_path: Path, fake_pip: list[list[str]]) -> None:
    target = stage("0.1.17", "3.11", "x86_64", tmp_path)
    assert target == tmp_path / "router-vllm-router-0.1.17-py311"
    assert sorted(p.name for p in target.iterdir()) == sorted(
        [*WHEELS, LOCK_NAME, ARCHIVE_NAME])
    assert (target / LOCK_NAME).read_text() == _fake_wheels(WHEELS)
    assert not (tmp_path / "router-vllm-router-0.1.17-py311.partial").exists()
    assert len(fake_pip) == 1 and _values(fake_pip[0], "--python-version") == ["3.11"]
    assert stage("0.1.17", "3.11", "x86_64", tmp_path) == target
    assert len(fake_pip) == 1  # everything present with matching hashes: no pip run


def test_stage_rebuilds_a_tampered_directory(tmp_path: Path,
                                             fake_pip: list[list[str]]) -> None:
    target = stage("0.1.17", "3.11", "x86_64", tmp_path)
    text = (target / LOCK_NAME).read_text()
    wheel = target / next(iter(WHEELS))
    wheel.write_bytes(b"not the locked bytes")
    assert not staged(target, text, "3.11", "x86_64")
    stage("0.1.17", "3.11", "x86_64", tmp_path)
    assert len(fake_pip) == 2 and wheel.read_bytes() == b"router"
    (target / "extra-1.0-py3-none-any.whl").write_bytes(b"x")
    assert not staged(target, text, "3.11", "x86_64")


def test_stage_reports_a_failed_download(tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(router_wheels, "lock_text", lambda version: _fake_wheels(WHEELS))
    monkeypatch.setattr(router_wheels.subprocess, "run", lambda argv, **_: (
        subprocess.CompletedProcess(argv, 1, "", "ERROR: No matching distribution")))
    with pytest.raises(WheelhouseError, match="No matching distribution"):
        stage("0.1.17", "3.11", "x86_64", tmp_path)
    assert list(tmp_path.iterdir()) == []  # no half-staged directory left behind


def test_the_lab_stages_for_its_hosts() -> None:
    from deploy_kit.core.router_lock import lock_path
    from deploykit_lab import serving
    from deploykit_lab.inventory import router_vars

    assert lock_path(serving.ROUTER_VERSION).is_file()

    assert (serving.HOST_PYTHON, serving.HOST_MACHINE) == ("3.11", "x86_64")
    name = stage_name(serving.ROUTER_VERSION, serving.HOST_PYTHON, serving.HOST_MACHINE)
    assert name == f"router-vllm-router-{serving.ROUTER_VERSION}-py311"
    path = Path("/var/cache/deploykit/wheelhouse") / name
    assert router_vars(path) == {"router_wheel_dir": str(path)}
