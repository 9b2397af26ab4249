"""What one run of the CLI reads and writes: its streams and its environment variables.

The installed `deploykit` uses this process's own (sys.stdin/stdout/stderr, os.environ).
Tests hand `deploy_kit.cli.app.main` their own Environment to run a command in process and
read back what it wrote (httpie's `Environment` is the model).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TextIO

from rich.console import Console

from deploy_kit import console as console_module

# Variables read once per process and cached (deploy_kit.project.project_dir and the
# Jinja environment over its templates): a run with another value starts from scratch.
CACHED_VARIABLES = ("DEPLOYKIT_PROJECT_DIR",)


@dataclass(frozen=True)
class Environment:
    stdin: TextIO = field(default_factory=lambda: sys.stdin)
    stdout: TextIO = field(default_factory=lambda: sys.stdout)  # machine output (--json)
    stderr: TextIO = field(default_factory=lambda: sys.stderr)  # the rich console, humans
    env: Mapping[str, str] | None = None  # the variables of the run; None: os.environ as is
    stderr_isatty: bool | None = None  # None: ask stderr (rich's own detection)
    color: bool | None = None  # None: rich decides (terminal, NO_COLOR, TERM); False: plain

    def make_console(self) -> Console:
        """The run's console: on stderr, sized and coloured from the run's variables
        (COLUMNS, NO_COLOR, FORCE_COLOR, TERM), no highlighting of numbers and paths."""
        width = console_module.human_width(
            self.stderr, os.environ if self.env is None else self.env, self.stderr_isatty)
        return Console(file=self.stderr, highlight=False, force_terminal=self.stderr_isatty,
                       color_system=None if self.color is False else "auto",
                       width=width, _environ=self.env)

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        """For the block: the process's streams and os.environ are this environment's, and
        deploy_kit.console answers its console and stdout. Everything is restored after."""
        with contextlib.ExitStack() as stack:
            if self.env is not None:
                stack.enter_context(_environ(self.env))
            stack.enter_context(_stdin(self.stdin))
            stack.enter_context(contextlib.redirect_stdout(self.stdout))
            stack.enter_context(contextlib.redirect_stderr(self.stderr))
            stack.enter_context(console_module.bound(self.make_console(), self.stdout))
            yield


@contextlib.contextmanager
def _stdin(stream: TextIO) -> Iterator[None]:
    saved, sys.stdin = sys.stdin, stream
    try:
        yield
    finally:
        sys.stdin = saved


@contextlib.contextmanager
def _environ(env: Mapping[str, str]) -> Iterator[None]:
    saved = dict(os.environ)
    stale = any(saved.get(k) != env.get(k) for k in CACHED_VARIABLES)
    os.environ.clear()
    os.environ.update(env)
    if stale:
        _forget_cached_paths()
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)
        if stale:
            _forget_cached_paths()


def _forget_cached_paths() -> None:
    from deploy_kit.project import project_dir
    from deploy_kit.render.templating import environment

    project_dir.cache_clear()
    environment.cache_clear()
