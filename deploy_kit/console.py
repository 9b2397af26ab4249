"""The one rich console for humans (stderr); stdout is kept for machine output (--json).

`console()` and `stdout()` are what the commands write to: the process's own streams, or,
for the duration of one `deploy_kit.cli.app.main(argv, env)` call, that call's
`Environment` (see `bound`).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TextIO, cast

from rich.console import Console

_default: Console | None = None
_bound: list[tuple[Console, TextIO]] = []  # innermost binding last


def console() -> Console:
    """The console of the running command: stderr, no highlighting of numbers and paths."""
    global _default
    if _bound:
        return _bound[-1][0]
    if _default is None:  # created on first use, as the module-level console was on import
        _default = Console(stderr=True, highlight=False,
                           width=human_width(sys.stderr, os.environ))
    return _default


UNBOUNDED = 1 << 12  # data into a pipe or a file: as wide as its widest line


def human_width(stream: TextIO, environ: Mapping[str, str],
                isatty: bool | None = None) -> int | None:
    """The human console's width: a terminal's own (None: rich asks it) or COLUMNS; into a
    CI or AWX log (no terminal, no COLUMNS) unbounded, so an error stays one line that a
    reader can grep and a path is never cut in two."""
    if environ.get("COLUMNS", "").strip().isdigit():
        return None  # rich reads COLUMNS itself
    return None if (_isatty(stream) if isatty is None else isatty) else UNBOUNDED


def data_console() -> Console:
    """A rich console on stdout for a command's data (tables a user redirects to a file),
    as wide as the human console; colour only when stdout is a terminal. Into a pipe or a
    file with no COLUMNS set, nothing is cut or wrapped to rich's default of 80 columns
    (tables keep their natural width)."""
    human = console()
    out = stdout()
    width = human_width(out, os.environ)
    if width is None and human.width != UNBOUNDED:
        width = human.width  # a terminal or COLUMNS: the human console's columns
    return Console(file=out, highlight=False, width=width,
                   no_color=human.no_color or human.color_system is None)


def _isatty(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


class ReaderGone(Exception):
    """stdout's reader closed the pipe (`| head`). Not an OSError: Click turns a broken
    pipe into a bare exit 1 before deploykit could say what happened."""


class _ReaderAware:
    """A text stream whose broken pipe raises ReaderGone; everything else is the stream's."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            raise ReaderGone from None

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            raise ReaderGone from None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def stdout() -> TextIO:
    """Where machine output (--json, --print-command) goes."""
    stream = _bound[-1][1] if _bound else sys.stdout
    return cast(TextIO, _ReaderAware(stream))


@contextmanager
def bound(rich_console: Console, out: TextIO) -> Iterator[Console]:
    """console() and stdout() answer `rich_console` and `out` inside the block."""
    _bound.append((rich_console, out))
    try:
        yield rich_console
    finally:
        _bound.pop()


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(n) < 1024 or unit == "PiB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    return f"{n} PiB"
