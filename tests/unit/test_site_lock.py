"""One converge at a time: the site lock refuses a second run at once, naming the holder,
and never outlives the process that took it."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import time
from pathlib import Path

import pytest
import yaml

from deploy_kit.core.exit_codes import ExitCode
from deploy_kit.ops import site_lock
from tests.cli import run_cli
from tests.conftest import BASE_HOSTS, InventoryFactory


@pytest.fixture(autouse=True)
def _private_lock_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    locks = tmp_path / "locks"
    monkeypatch.setenv(site_lock.LOCK_DIR_ENV, str(locks))
    monkeypatch.setenv("DEPLOYKIT_RUNS_DIR", str(tmp_path / "runs"))
    return locks


def _hold(root: str, verb: str, held: object, release: object) -> None:
    with site_lock.site_lock(Path(root), verb) as lock:
        lock.note(run="runs/20261206T000000Z-up")
        held.set()  # type: ignore[attr-defined]
        release.wait(60)  # type: ignore[attr-defined]


def _holder(root: Path, verb: str = "up") -> tuple[multiprocessing.process.BaseProcess,
                                                   object]:
    ctx = multiprocessing.get_context("fork")
    held, release = ctx.Event(), ctx.Event()
    proc = ctx.Process(target=_hold, args=(str(root), verb, held, release))
    proc.start()
    assert held.wait(30), "the holder never took the lock"
    return proc, release


def test_a_second_taker_is_refused_at_once_naming_the_holder(tmp_path: Path) -> None:
    root = tmp_path / "inv"
    root.mkdir()
    proc, release = _holder(root)
    try:
        start = time.monotonic()
        with pytest.raises(site_lock.SiteBusy) as busy, site_lock.site_lock(root, "down"):
            pytest.fail("took a lock another process holds")
        assert time.monotonic() - start < 2  # no waiting by default
        assert busy.value.exit_code == ExitCode.ENVIRONMENT
        message = busy.value.message
        assert f"pid {proc.pid}" in message and "up by " in message
        assert "runs/20261206T000000Z-up" in message and str(root.resolve()) in message
        assert "\n" not in message
    finally:
        release.set()  # type: ignore[attr-defined]
        proc.join(30)
    with site_lock.site_lock(root, "up") as lock:  # free once the holder is done
        assert lock.record["pid"] == os.getpid()


def test_a_killed_holder_leaves_a_record_that_does_not_block(tmp_path: Path) -> None:
    root = tmp_path / "inv"
    root.mkdir()
    proc, _ = _holder(root)
    os.kill(proc.pid, signal.SIGKILL)  # no cleanup: its record stays in the file
    proc.join(30)
    stale = json.loads(site_lock.lock_path(root).read_text())
    assert stale["pid"] == proc.pid
    with site_lock.site_lock(root, "up") as lock:
        assert json.loads(site_lock.lock_path(root).read_text())["pid"] == os.getpid()
        assert lock.record["verb"] == "up"
    assert site_lock.lock_path(root).read_text() == ""  # released cleanly: no record


def test_wait_lock_waits_for_the_holder(tmp_path: Path) -> None:
    root = tmp_path / "inv"
    root.mkdir()
    proc, release = _holder(root)
    ctx = multiprocessing.get_context("fork")
    releaser = ctx.Process(target=lambda: (time.sleep(0.6), release.set()))  # type: ignore[attr-defined]
    releaser.start()
    start = time.monotonic()
    with site_lock.site_lock(root, "up", wait_s=30):
        waited = time.monotonic() - start
    proc.join(30)
    releaser.join(30)
    assert 0.4 < waited < 20


def test_sites_lock_apart_and_the_lock_dir_is_private(tmp_path: Path,
                                                      _private_lock_dir: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    with site_lock.site_lock(a, "up"), site_lock.site_lock(b, "up"):
        assert site_lock.lock_path(a) != site_lock.lock_path(b)
    # one site however it is spelled (relative, a symlink to it)
    (tmp_path / "link").symlink_to(a)
    assert site_lock.lock_path(tmp_path / "link") == site_lock.lock_path(a)
    assert _private_lock_dir.stat().st_mode & 0o777 == 0o700
    assert site_lock.lock_path(a).stat().st_mode & 0o777 == 0o600


def test_a_read_only_inventory_can_be_locked(tmp_path: Path) -> None:
    root = tmp_path / "inv"
    root.mkdir()
    root.chmod(0o555)
    try:
        with site_lock.site_lock(root, "up"):
            assert list(root.iterdir()) == []  # nothing written beside the inventory
    finally:
        root.chmod(0o755)


def test_up_and_down_refuse_while_held_and_listing_needs_no_lock(
        make_inventory: InventoryFactory) -> None:
    root = make_inventory()
    proc, release = _holder(root)
    try:
        for verb in (["up"], ["down", "--yes"]):
            result = run_cli(*verb, "-i", str(root))
            assert result.returncode == ExitCode.ENVIRONMENT, result.stdout + result.stderr
            refusal = [line for line in result.stderr.splitlines() if "error:" in line]
            assert len(refusal) == 1 and f"pid {proc.pid}" in refusal[0]
            assert "another deploykit run holds the lock" in refusal[0]
            assert "unreachable" not in result.stdout + result.stderr  # before any host
        assert not (root / ".deploykit-tls").exists()
        for args in (["up", "--print-command"], ["down", "--print-command"]):
            result = run_cli(*args, "-i", str(root))
            assert result.returncode == 0, result.stdout + result.stderr
    finally:
        release.set()  # type: ignore[attr-defined]
        proc.join(30)


def test_wait_lock_is_an_option_of_up_and_down() -> None:
    for verb in ("up", "down"):
        assert "--wait-lock" in run_cli(verb, "--help").stdout
    assert yaml.safe_dump(BASE_HOSTS)  # the inventory the CLI tests use is the usual one


def test_bench_ttft_restarts_nothing_while_a_converge_holds_the_site(
        make_inventory: InventoryFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    from deploy_kit.bench import ttft

    def never(*_: object, **__: object) -> None:
        raise AssertionError("the TTFT protocol ran beside a converge")

    monkeypatch.setattr(ttft, "run", never)
    root = make_inventory()
    proc, release = _holder(root)
    try:
        result = run_cli("bench", "ttft", "--yes", "-i", str(root))
        assert result.returncode == ExitCode.ENVIRONMENT, result.stdout + result.stderr
        assert f"pid {proc.pid}" in result.stderr
    finally:
        release.set()  # type: ignore[attr-defined]
        proc.join(30)
