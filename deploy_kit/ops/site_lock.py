"""One converge at a time per site: an exclusive flock on the controller, naming its holder.

`up`, `down` and `bench ttft` (which restarts a serving host) take it before anything is
written or contacted; `--check`, `--list-hosts`, `--list-tasks` and `--print-command` do
not. The lock is keyed by the site's resolved inventory directory and lives in a private
per-user directory outside the inventory (a read-only checkout works), one file per site:
`$DEPLOYKIT_LOCK_DIR`, else `$XDG_STATE_HOME/deploykit/locks`, else
`~/.local/state/deploykit/locks` (0700). The file holds a JSON record of the holder (pid,
user, host, verb, start time, run record); the flock, not the record, is the lock: the
kernel drops it when the process ends, however it ends, so a record left by a killed run
never blocks the next one (it is overwritten).
"""

from __future__ import annotations

import datetime
import errno
import fcntl
import getpass
import hashlib
import json
import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from deploy_kit.core.errors import EnvironmentProblem

LOCK_DIR_ENV = "DEPLOYKIT_LOCK_DIR"
POLL_S = 0.2  # how often --wait-lock retries
MAX_RECORD = 4096  # a holder record is ~300 bytes; more is not ours
# the locks this process holds, by lock file: a run inside a held lock (each wave of an
# upgrade flow is one `up`) reuses it instead of waiting on itself (flock is per open file)
_HELD: dict[str, SiteLock] = {}


class SiteBusy(EnvironmentProblem):
    """Another deploykit run holds this site's lock (exit 7: this machine cannot run the
    command now; nothing was written and no host was contacted)."""


def lock_dir() -> Path:
    env = os.environ.get(LOCK_DIR_ENV)
    if env:
        return Path(env).expanduser()
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "deploykit" / "locks"


def lock_path(root: Path) -> Path:
    """One file per site, named by a digest of the resolved inventory directory."""
    key = hashlib.sha256(str(root.resolve()).encode()).hexdigest()[:24]
    return lock_dir() / f"site-{key}.lock"


class SiteLock:
    """The held lock: `note` adds fields to the holder record (e.g. the run record)."""

    def __init__(self, fd: int, record: dict[str, Any]) -> None:
        self._fd = fd
        self.record = record

    def note(self, **fields: Any) -> None:
        self.record |= fields
        _write_record(self._fd, self.record)


@contextmanager
def site_lock(root: Path, verb: str, wait_s: float = 0.0) -> Iterator[SiteLock]:
    """Hold the site's lock for the block, or raise SiteBusy naming the holder (at once,
    or after wait_s seconds of retrying)."""
    path = lock_path(root)
    held = _HELD.get(str(path))
    if held is not None:  # this process holds it (an upgrade flow's runs): the same lock
        yield held
        return
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise EnvironmentProblem(f"cannot open the site lock {path}: {exc.strerror}",
                                 hint=f"set {LOCK_DIR_ENV} to a private writable directory"
                                 ) from None
    try:
        _acquire(fd, path, root, wait_s)
        record = {"pid": os.getpid(), "user": _user(), "host": socket.gethostname(),
                  "verb": verb, "inventory": str(root.resolve()),
                  "started": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")}
        try:
            _write_record(fd, record)
            lock = _HELD[str(path)] = SiteLock(fd, record)
            yield lock
        finally:
            _HELD.pop(str(path), None)
            os.ftruncate(fd, 0)  # released (the run failed or not): no record to mislead
    finally:
        os.close(fd)  # closing the last descriptor drops the flock


def _acquire(fd: int, path: Path, root: Path, wait_s: float) -> None:
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EACCES):
                raise
        if time.monotonic() >= deadline:
            raise SiteBusy(f"another deploykit run holds the lock of {root.resolve()}: "
                           f"{describe(read_record(fd))} (lock file {path})")
        time.sleep(POLL_S)


def read_record(fd: int) -> dict[str, Any]:
    try:
        data = json.loads(os.pread(fd, MAX_RECORD, 0) or b"{}")
    except ValueError:  # the holder is between truncate and write
        return {}
    return data if isinstance(data, dict) else {}


def describe(record: dict[str, Any]) -> str:
    if not record.get("pid"):
        return "holder not recorded yet"
    where = f"{record.get('user', '?')}@{record.get('host', '?')}"
    text = (f"{record.get('verb', '?')} by {where}, pid {record['pid']}, "
            f"since {record.get('started', '?')}")
    return text + (f", run record {record['run']}" if record.get("run") else "")


def _write_record(fd: int, record: dict[str, Any]) -> None:
    data = (json.dumps(record, sort_keys=True) + "\n").encode()
    os.ftruncate(fd, 0)
    os.pwrite(fd, data, 0)


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry (a container's arbitrary uid)
        return str(os.getuid())
