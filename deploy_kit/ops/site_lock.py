"""One converge at a time per site: an exclusive flock on the controller, naming its holder.

`up`, `down`, `remove`, `secrets rotate` and `bench ttft` (which restarts a serving host)
take it before anything is written or contacted; `--check`, `--list-hosts`, `--list-tasks`
and `--print-command` do not. The lock is keyed by the site's identity (its S3 name, bucket
and Consul datacenter), so two clones of one site repository take the same lock, and lives
in a directory outside the inventory (a read-only checkout works), one file per site:
`$DEPLOYKIT_LOCK_DIR` (an absolute path), else `$XDG_STATE_HOME/deploykit/locks`, else
`~/.local/state/deploykit/locks` (0700). The directory is trusted only if it is no link,
is owned by this user or root, and nobody else may write in it, except a shared one: owned
by root with the sticky bit, writable by a group (never by everyone); any other directory
is refused (exit 7) rather than used. The file holds a JSON record of the holder (pid,
user, host, verb, start time, run record); the flock, not the record, is the lock: the
kernel drops it when the process ends, however it ends, so a record left by a killed run
never blocks the next one (it is overwritten). The record is printed with control
characters removed: it is text another process wrote.
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
import stat
import time
import unicodedata
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deploy_kit.core.errors import EnvironmentProblem

if TYPE_CHECKING:
    from deploy_kit.config.site import Site

LOCK_DIR_ENV = "DEPLOYKIT_LOCK_DIR"
POLL_S = 0.2  # how often --wait-lock retries
MAX_RECORD = 4096  # a holder record is ~300 bytes; more is not ours
MAX_FIELD = 200  # a holder field shown in a message
# the locks this process holds, by lock file: a run inside a held lock (each wave of an
# upgrade flow is one `up`) reuses it instead of waiting on itself (flock is per open file)
_HELD: dict[str, SiteLock] = {}
_FIX = f"set {LOCK_DIR_ENV} to an absolute path of a private directory (0700, yours)"


class SiteBusy(EnvironmentProblem):
    """Another deploykit run holds this site's lock (exit 7: this machine cannot run the
    command now; nothing was written and no host was contacted)."""


def lock_dir() -> Path:
    env = os.environ.get(LOCK_DIR_ENV)
    if env:
        path = Path(env).expanduser()
        if not path.is_absolute():
            raise EnvironmentProblem(f"{LOCK_DIR_ENV}={clean(env)} is a relative path: the "
                                     "site lock would depend on the working directory",
                                     hint=_FIX)
        return path
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "deploykit" / "locks"


def identity(site: Site) -> str:
    """What makes two inventories one site: the S3 name its clients use, its bucket and its
    Consul datacenter (site-wide values the rules hold to one value), not the directory a
    checkout happens to sit in. The site bucket only, not the teams' or sharing groups':
    those are per-host or come and go with `teams`, and adding a team must not make the
    same site a second one with a second lock."""
    c = site.settings
    return json.dumps({"s3": c.deploykit_s3_fqdn.lower(), "bucket": c.deploykit_s3_bucket,
                       "datacenter": c.consul_datacenter.lower()}, sort_keys=True)


def lock_path(site: Site | Path) -> Path:
    """One file per site, named by a digest of its identity (a bare directory: of its
    resolved path, for callers with no opened site)."""
    key = identity(site) if not isinstance(site, Path) else str(site.resolve())
    return lock_dir() / f"site-{hashlib.sha256(key.encode()).hexdigest()[:24]}.lock"


def _where(site: Site | Path) -> Path:
    return (site if isinstance(site, Path) else site.root).resolve()


class SiteLock:
    """The held lock: `note` adds fields to the holder record (e.g. the run record)."""

    def __init__(self, fd: int, record: dict[str, Any]) -> None:
        self._fd = fd
        self.record = record

    def note(self, **fields: Any) -> None:
        self.record |= fields
        _write_record(self._fd, self.record)


@contextmanager
def site_lock(site: Site | Path, verb: str, wait_s: float = 0.0) -> Iterator[SiteLock]:
    """Hold the site's lock for the block, or raise SiteBusy naming the holder (at once,
    or after wait_s seconds of retrying); EnvironmentProblem (exit 7) when the lock
    directory cannot be made or trusted."""
    path = lock_path(site)
    held = _HELD.get(str(path))
    if held is not None:  # this process holds it (an upgrade flow's runs): the same lock
        yield held
        return
    fd = open_lock(path)
    try:
        _acquire(fd, path, _where(site), wait_s)
        record = {"pid": os.getpid(), "user": _user(), "host": socket.gethostname(),
                  "verb": verb, "inventory": str(_where(site)),
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


def open_lock(path: Path) -> int:
    """The lock file, opened read-write below a directory this user can trust (made 0700
    if missing); never through a link. Every failure is one line, exit 7."""
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
                         | os.O_CLOEXEC)
    except OSError as exc:
        reason = "it is a symbolic link" if path.parent.is_symlink() else _reason(exc)
        raise EnvironmentProblem(f"cannot use the lock directory {clean(path.parent)}: "
                                 f"{reason}", hint=_FIX) from None
    try:
        shared = trusted_dir(os.fstat(dir_fd), path.parent)
        try:
            fd = os.open(path.name, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                         0o660 if shared else 0o600, dir_fd=dir_fd)
        except OSError as exc:
            raise EnvironmentProblem(f"cannot open the site lock {clean(path)}: {_reason(exc)}",
                                     hint=_FIX) from None
    finally:
        os.close(dir_fd)
    st = os.fstat(fd)
    problem = _file_problem(st, shared)
    if not problem and shared and st.st_uid == os.geteuid():
        os.fchmod(fd, 0o660)  # the other operators open it too (whatever this umask)
    if problem:
        os.close(fd)
        raise EnvironmentProblem(f"the site lock {clean(path)} {problem}", hint=_FIX)
    return fd


def _reason(exc: OSError) -> str:
    if exc.errno == errno.ELOOP:
        return "it is a symbolic link"
    return exc.strerror or str(exc)


def trusted_dir(st: os.stat_result, where: Path) -> bool:
    """Raise unless the lock directory is one only this user (or root) controls; True for a
    shared one: root's, sticky, group-writable (nobody can remove another's lock file)."""
    mode = stat.S_IMODE(st.st_mode)
    if st.st_uid not in (os.geteuid(), 0):
        problem = f"is owned by uid {st.st_uid}, not by you or root"
    elif mode & 0o002:
        problem = f"is writable by every user (mode {mode:04o})"
    elif mode & 0o020 and not (st.st_uid == 0 and mode & stat.S_ISVTX):
        problem = (f"is group-writable (mode {mode:04o}) without being a shared lock "
                   "directory (root's, with the sticky bit: chmod 1770)")
    else:
        return bool(mode & 0o020)
    raise EnvironmentProblem(f"the lock directory {clean(where)} {problem}: another user could "
                             "hold or forge the site's lock", hint=_FIX)


def _file_problem(st: os.stat_result, shared: bool) -> str:
    if not stat.S_ISREG(st.st_mode):
        return "is not a regular file"
    if stat.S_IMODE(st.st_mode) & 0o002:
        return "is writable by every user"
    if not shared and st.st_uid != os.geteuid():
        return f"is owned by uid {st.st_uid}, not by you"
    return ""


def _acquire(fd: int, path: Path, where: Path, wait_s: float) -> None:
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EACCES):
                raise EnvironmentProblem(f"cannot lock {clean(path)}: {_reason(exc)}",
                                         hint=_FIX) from None
        if time.monotonic() >= deadline:
            raise SiteBusy(f"another deploykit run holds the lock of {clean(where)}: "
                           f"{describe(read_record(fd))} (lock file {clean(path)})")
        time.sleep(POLL_S)


def read_record(fd: int) -> dict[str, Any]:
    try:
        data = json.loads(os.pread(fd, MAX_RECORD, 0) or b"{}")
    except ValueError:  # the holder is between truncate and write
        return {}
    return data if isinstance(data, dict) else {}


def clean(value: object) -> str:
    """Text another process wrote, safe to print: no control or format characters (an
    escape sequence would reach the terminal), no lone surrogates, at most MAX_FIELD."""
    text = "".join(ch if unicodedata.category(ch)[0] != "C" else "?" for ch in str(value))
    return text[:MAX_FIELD] + ("…" if len(text) > MAX_FIELD else "")


def describe(record: dict[str, Any]) -> str:
    if not record.get("pid"):
        return "holder not recorded yet"
    f = {k: clean(record.get(k, "?")) for k in ("verb", "user", "host", "pid", "started")}
    text = f"{f['verb']} by {f['user']}@{f['host']}, pid {f['pid']}, since {f['started']}"
    return text + (f", run record {clean(record['run'])}" if record.get("run") else "")


def _write_record(fd: int, record: dict[str, Any]) -> None:
    data = (json.dumps(record, sort_keys=True) + "\n").encode()
    os.ftruncate(fd, 0)
    os.pwrite(fd, data, 0)


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry (a container's arbitrary uid)
        return str(os.getuid())
