"""Run one function in a forked child under a wall-time and an address-space limit, and take
back its JSON result through a pipe, read up to a size limit.

Ansible's inventory API runs operator code and reads operator files without bounds (an
inventory script that never returns, a YAML alias bomb in an INI inventory's group_vars,
a script printing without end). In the child, none of that can hang or exhaust deploykit:
the child leads its own process group (a script it starts dies with it), has stdin, stdout
and stderr on /dev/null, and is killed at the deadline.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import resource
import select
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

ENV_SECONDS = "DEPLOYKIT_INVENTORY_TIMEOUT"  # seconds Ansible may take to read an inventory
ENV_MEMORY_MB = "DEPLOYKIT_INVENTORY_MEMORY_MB"  # MiB it may use beyond deploykit's own
DEFAULT_SECONDS = 20.0  # well below the 30 s an operator (or a CI step) waits for validate
DEFAULT_MEMORY_MB = 2048
MAX_RESULT_BYTES = 256 << 20
_OUT_OF_MEMORY = re.compile(r"MemoryError|Cannot allocate memory")


class Exceeded(Exception):
    """The child ran out of time or memory, or died: `why` is one line for an operator."""

    def __init__(self, why: str, fix: str) -> None:
        super().__init__(why)
        self.why = why
        self.fix = fix


def limits(env: dict[str, str] | None = None) -> tuple[float, int]:
    """(seconds, extra bytes) from the environment, defaults where unset or not a number."""
    env = dict(os.environ) if env is None else env

    def number(name: str, default: float) -> float:
        try:
            value = float(env.get(name, default))
        except ValueError:
            return default
        return value if 0 < value < 1e6 else default

    return number(ENV_SECONDS, DEFAULT_SECONDS), int(number(ENV_MEMORY_MB, DEFAULT_MEMORY_MB)) << 20


def _address_space() -> int:
    """This process's virtual size now: the child starts with it (a fork), so its limit
    is this plus the budget."""
    try:
        with open("/proc/self/statm") as handle:
            return int(handle.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 1 << 30


def run_bounded(work: Callable[[], Any], what: str,
                env: dict[str, str] | None = None) -> Any:
    """work()'s JSON-able result, computed in a child; Exceeded when it could not finish.
    `what` names the input in messages (an inventory source)."""
    seconds, budget = limits(env)
    read_end, write_end = os.pipe()
    ceiling = _address_space() + budget
    pid = os.fork()
    if pid == 0:  # the child: never returns, never runs the parent's cleanup
        code = 0
        try:
            os.close(read_end)
            os.setsid()
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1):
                os.dup2(null, fd)
            # Ansible's warnings: where it reports, and swallows, running out of memory
            log = tempfile.TemporaryFile()  # noqa: SIM115 - lives until os._exit
            os.dup2(log.fileno(), 2)
            # the parent's Python streams may be a test's or the CLI's buffers: the fds here
            sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115 - until os._exit
            sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115 - until os._exit
            resource.setrlimit(resource.RLIMIT_AS, (ceiling, ceiling))
            try:
                payload = json.dumps({"ok": work()}).encode()
            except MemoryError:
                payload = b'{"memory": true}'
            except RecursionError:
                payload = b'{"error": "nested too deeply"}'
            except Exception as exc:  # a plugin's own error: one line
                if _ran_out_of_memory(exc):  # Ansible wraps it in errors of its own
                    payload = b'{"memory": true}'
                else:
                    line = (str(exc).splitlines() or [type(exc).__name__])[0][:300]
                    payload = json.dumps({"error": line}).encode()
            sys.stderr.flush()
            log.seek(max(0, os.fstat(log.fileno()).st_size - (64 << 10)))
            if _OUT_OF_MEMORY.search(log.read().decode(errors="replace")):
                payload = b'{"memory": true}'
            with os.fdopen(write_end, "wb") as out:
                out.write(payload)
        except BaseException:
            code = 70
        finally:
            os._exit(code)
    os.close(write_end)
    chunks: list[bytes] = []
    size = 0
    deadline = time.monotonic() + seconds
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise Exceeded(f"Ansible did not finish reading it within {seconds:g} s "
                               "(an inventory script or plugin that hangs?)",
                               f"make `ansible-inventory {what} --list` finish, or raise "
                               f"{ENV_SECONDS} (seconds)")
            ready, _, _ = select.select([read_end], [], [], min(left, 1.0))
            if not ready:
                continue
            chunk = os.read(read_end, 1 << 20)
            if not chunk:
                break
            size += len(chunk)
            if size > MAX_RESULT_BYTES:
                raise Exceeded(f"Ansible's view of it is larger than {MAX_RESULT_BYTES >> 20} "
                               "MiB", "split the inventory or shrink its variables")
            chunks.append(chunk)
    finally:
        os.close(read_end)
        status = _reap(pid, deadline)
    data = b"".join(chunks)
    if not data:
        why = (f"killed by signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) else
               f"exit status {os.waitstatus_to_exitcode(status)}")
        raise Exceeded(f"Ansible crashed reading it ({why})",
                       f"check it with `ansible-inventory {what} --list`")
    result = json.loads(data)
    if result.get("memory"):
        raise Exceeded(f"Ansible needed more than {budget >> 20} MiB to read it (a YAML alias "
                       "bomb, a huge script output?)",
                       f"shrink it, or raise {ENV_MEMORY_MB} (MiB)")
    if "error" in result:
        raise Exceeded(f"Ansible could not read it: {result['error']}",
                       f"check it with `ansible-inventory {what} --list`")
    return result["ok"]


def _ran_out_of_memory(exc: BaseException | None) -> bool:
    seen = 0
    while exc is not None and seen < 50:
        if isinstance(exc, MemoryError):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


def _reap(pid: int, deadline: float) -> int:
    """Wait for the child (its whole group killed once the deadline has passed)."""
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            _kill_group(pid)  # a script the child started and left behind
            return status
        if time.monotonic() >= deadline:
            _kill_group(pid)
            return os.waitpid(pid, 0)[1]
        time.sleep(0.01)


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
