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
    # an inventory is locked as the CLI locks it: by the site's identity
    target = Path(root)
    if (target / "hosts.yml").exists():
        from deploy_kit.ops.site import open_site

        target = open_site(root)  # type: ignore[assignment]
    with site_lock.site_lock(target, verb) as lock:
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


def _refused(root: Path) -> str:
    """The one-line exit-7 refusal of taking root's lock."""
    from deploy_kit.core.errors import EnvironmentProblem

    with pytest.raises(EnvironmentProblem) as refused, site_lock.site_lock(root, "up"):
        pytest.fail("took a lock in a directory it cannot trust")
    assert refused.value.exit_code == ExitCode.ENVIRONMENT
    assert "\n" not in refused.value.message and "\x1b" not in refused.value.message
    return refused.value.message


def test_a_lock_dir_that_cannot_be_made_exits_7_with_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "inv"
    root.mkdir()
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    odd = tmp_path / "a\udcff\x1b[2J-file"  # undecodable bytes and an escape in its name
    odd.write_text("")
    for where in (blocker, blocker / "locks", Path("/proc/deploykit-locks/x"), odd):
        monkeypatch.setenv(site_lock.LOCK_DIR_ENV, str(where))
        message = _refused(root)
        assert "cannot use the lock directory" in message
        message.encode("utf-8")  # printable: no lone surrogate reaches the terminal
    assert blocker.read_text() == ""
    monkeypatch.setenv(site_lock.LOCK_DIR_ENV, "relative/locks")
    assert "is a relative path" in _refused(root)
    assert not Path("relative").exists()


def test_an_untrusted_lock_dir_or_file_is_refused_not_used(
        tmp_path: Path, _private_lock_dir: Path) -> None:
    root = tmp_path / "inv"
    root.mkdir()
    _private_lock_dir.mkdir(mode=0o700)
    for mode, says in ((0o777, "writable by every user"), (0o1777, "writable by every user"),
                       (0o770, "is group-writable")):
        _private_lock_dir.chmod(mode)
        assert says in _refused(root)
        assert list(_private_lock_dir.iterdir()) == []  # nothing made inside
    _private_lock_dir.chmod(0o700)
    os.chown(_private_lock_dir, 4242, 4242)
    assert "owned by uid 4242" in _refused(root)
    os.chown(_private_lock_dir, os.geteuid(), os.getegid())
    # a link in place of the directory, or of the lock file, is never followed
    real = tmp_path / "elsewhere"
    real.mkdir(mode=0o700)
    _private_lock_dir.rmdir()
    _private_lock_dir.symlink_to(real)
    assert "symbolic link" in _refused(root)
    _private_lock_dir.unlink()
    _private_lock_dir.mkdir(mode=0o700)
    site_lock.lock_path(root).symlink_to(real / "target")
    assert "symbolic link" in _refused(root) and not (real / "target").exists()


def test_a_shared_lock_dir_is_roots_sticky_and_group_writable(
        tmp_path: Path, _private_lock_dir: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to make a root-owned directory")
    root = tmp_path / "inv"
    root.mkdir()
    _private_lock_dir.mkdir()
    _private_lock_dir.chmod(0o1770)
    with site_lock.site_lock(root, "up"):
        assert site_lock.lock_path(root).stat().st_mode & 0o777 == 0o660
    os.chown(site_lock.lock_path(root), 4242, 4242)  # another operator's file: shared
    with site_lock.site_lock(root, "up"):
        pass


def test_the_holder_record_is_printed_without_control_characters(tmp_path: Path) -> None:
    root = tmp_path / "inv"
    root.mkdir()
    proc, release = _holder(root)
    try:
        path = site_lock.lock_path(root)
        record = json.loads(path.read_text())
        record |= {"user": "\x1b[2J\x1b]0;pwned\x07mallory", "host": "h\u202eost\r\nerror: x",
                   "run": "\x9b31m" + "r" * 1000}
        path.write_text(json.dumps(record))
        with pytest.raises(site_lock.SiteBusy) as busy, site_lock.site_lock(root, "down"):
            pytest.fail("took a held lock")
        message = busy.value.message
        assert not any(ord(ch) < 32 or 0x7f <= ord(ch) < 0xa0 or ch == "\u202e"
                       for ch in message), repr(message)
        assert "mallory" in message and len(message) < 1000
    finally:
        release.set()  # type: ignore[attr-defined]
        proc.join(30)


def test_two_clones_of_one_site_take_one_lock(make_inventory: InventoryFactory,
                                              tmp_path: Path) -> None:
    import shutil

    from deploy_kit.ops.site import open_site

    first = make_inventory()
    clone = tmp_path / "elsewhere" / "renamed"
    shutil.copytree(first, clone)
    a, b = open_site(str(first)), open_site(str(clone))
    assert site_lock.lock_path(a) == site_lock.lock_path(b)
    proc, release = _holder(first)
    try:
        with pytest.raises(site_lock.SiteBusy), site_lock.site_lock(b, "up"):
            pytest.fail("a second clone of the site took its lock")
    finally:
        release.set()  # type: ignore[attr-defined]
        proc.join(30)
    other = make_inventory(all={"deploykit_s3_bucket": "another-bucket"})
    assert site_lock.lock_path(open_site(str(other))) != site_lock.lock_path(a)


def test_up_exits_7_not_1_on_a_lock_dir_it_cannot_use(make_inventory: InventoryFactory,
                                                      tmp_path: Path) -> None:
    root = make_inventory()
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    result = run_cli("up", "-i", str(root), env={site_lock.LOCK_DIR_ENV: str(blocker / "x")})
    assert result.returncode == ExitCode.ENVIRONMENT, result.stdout + result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "cannot use the lock directory" in errors[0], result.stderr
    assert "Traceback" not in result.stderr and not (root / ".deploykit-tls").exists()
