"""The `deploykit` command line: verbs registered from one module per group.

Exceptions become exit codes here and nowhere else.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Annotated, Any

import typer
from rich.markup import escape

from deploy_kit import __version__, plugins
from deploy_kit.cli import (
    bench_cmds,
    cache_cmds,
    converge_cmds,
    remove_cmd,
    secrets_cmds,
    site_cmds,
    status_cmds,
    verify_cmds,
)
from deploy_kit.cli.environment import Environment
from deploy_kit.console import ReaderGone, console, stdout
from deploy_kit.core.errors import DeployKitError, InventoryError
from deploy_kit.core.exit_codes import ExitCode

# Plain (Click) help, not rich panels: it wraps at the terminal's width and never cuts a
# word, so `deploykit up --help | less` and a CI log read the same as a terminal.
app = typer.Typer(no_args_is_help=True, pretty_exceptions_enable=False, add_completion=True,
                  rich_markup_mode=None,
                  help="Provision and verify a shared KV-cache tier: Ceph RGW (S3), "
                       "Consul + CoreDNS, vLLM + LMCache.\n\nExit codes: 0 ok, 1 internal "
                       "error, 2 usage, 3 invalid inventory, 4 Ansible task failed, 5 hosts "
                       "unreachable, 6 verify failed, 7 missing prerequisite, 130 interrupted.")

for verb in (site_cmds.plan, site_cmds.render, site_cmds.validate, converge_cmds.up,
             site_cmds.wheelhouse, converge_cmds.down, remove_cmd.remove, verify_cmds.verify,
             verify_cmds.doctor):
    app.command()(verb)
app.command()(status_cmds.status)
app.add_typer(cache_cmds.cache_app, name="cache")
app.add_typer(bench_cmds.bench_app, name="bench")
app.add_typer(secrets_cmds.secrets_app, name="secrets")
# optional verbs from other distributions (`deploykit lab`: pip install -e ./deploykit-lab)
for name, plugin_app in plugins.verbs().items():
    app.add_typer(plugin_app, name=name)


@app.command()
def version() -> None:
    """Print deploykit's version."""
    stdout().write(f"deploykit {__version__}\n")


def _print_version(value: bool) -> None:
    if value:
        version()
        raise typer.Exit(0)


@app.callback()
def _options(show_version: Annotated[bool, typer.Option(
        "--version", is_eager=True, callback=_print_version,
        help="print deploykit's version and exit")] = False,
        debug: Annotated[bool, typer.Option(
            "--debug", help="on an error, also print the traceback (anywhere on the "
                            "command line: `deploykit up --debug` works too)")] = False
        ) -> None:
    """Provision and verify a shared KV-cache tier."""
    # main() takes --debug out of argv before Click sees it: this option is its help line


def command() -> Any:
    """The Click command tree, its help made plain for every verb (plugins' too):
    - each command's one-line summary is its docstring's first sentence in full (Click
      would cut it to the width left beside the command names);
    - a value without a metavar shows its name (LIMIT), never typer's `<list[str]>`;
    - a range reads `[at least 1]`, `[3 to 8]`, not `<int range> [x>=1]`."""
    from typer.core import TyperArgument

    root = typer.main.get_command(app)
    todo = [root]
    while todo:
        cmd = todo.pop()
        if cmd.short_help is None and cmd.help:
            cmd.short_help = _first_sentence(cmd.help)
        for param in cmd.params:
            if isinstance(param, TyperArgument):  # its name is its metavar: no `<str>` after
                param.display_type_rich = lambda ctx: None  # type: ignore[method-assign]
            elif param.metavar is None and not getattr(param, "is_flag", False):
                param.metavar = (param.name or "value").upper()
            low, high = getattr(param, "min", None), getattr(param, "max", None)
            if (low, high) != (None, None) and not (getattr(param, "count", False)
                                                    and (low, high) == (0, None)):
                words = _range_words(low, high)
                param._get_number_range_help_str = (  # type: ignore[attr-defined]
                    lambda words=words: words)
        todo += list(getattr(cmd, "commands", {}).values())
    return root


def _first_sentence(text: str) -> str:
    """The first paragraph up to its first full stop, on one line (Click's own summary,
    without its cut at the width left beside the command names)."""
    words = text.split("\n\n", 1)[0].split()
    for i, word in enumerate(words):
        if word.endswith("."):
            return " ".join(words[:i + 1])
    return " ".join(words)


def _range_words(low: float | None, high: float | None) -> str:
    if low is not None and high is not None:
        return f"{low:g} to {high:g}"
    return f"at least {low:g}" if low is not None else f"at most {high:g}"


def help_width() -> int | None:
    """The width help is wrapped at: COLUMNS or the terminal's (Click's own reading, None),
    or, into a pipe or a file, none at all (Click would wrap at 80 columns)."""
    if os.environ.get("COLUMNS", "").strip().isdigit():
        return None
    try:
        tty = sys.stdout.isatty()
    except (AttributeError, ValueError):
        tty = False
    return None if tty else 1 << 16


def main(argv: list[str] | None = None, env: Environment | None = None) -> int:
    """Run one command and return its exit code (the ExitCode values in the help above).

    `argv` defaults to sys.argv[1:], `env` to this process's streams and variables; the
    installed `deploykit` script exits with the returned code. Tests pass their own
    Environment to run a command in process and read what it wrote."""
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    args = [a for a in args if a != "--debug"]
    env = env or Environment()
    with env.active():
        why = unencodable_argument(args)
        rc = _run(args, debug, env) if why is None else _usage(env, why)
        try:  # what is still buffered meets the reader now, not at interpreter exit
            env.stdout.flush()
        except BrokenPipeError:
            rc = _reader_gone(env)
        return rc


def unencodable_argument(args: list[str]) -> str | None:
    """Why an argument cannot be passed on, or None. Each is handed to Ansible (-e, --limit,
    --tags, paths) or printed: a byte that is not UTF-8 reaches Python as a lone surrogate,
    which no argv, file or terminal can encode. The value is never quoted."""
    for i, arg in enumerate(args):
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError:
            option, _, _ = arg.partition("=")
            before = args[i - 1] if i else ""
            name = (f"the value of {option}" if arg.startswith("--") and "=" in arg
                    and option.isascii() else f"argument {i + 1}" +
                    (f" (after {before})" if before.isascii() and before else ""))
            return (f"{name} is not valid UTF-8 text (a lone surrogate or a byte that is not "
                    "UTF-8); retype it")
    return None


def _usage(env: Environment, why: str) -> int:
    env.stderr.write(f"Error: {why}\n")
    return ExitCode.USAGE


def printable(text: str) -> str:
    """`text` as a terminal can take it: what does not encode as UTF-8, as its escape."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _reader_gone(env: Environment) -> int:
    """The reader closed the pipe (`deploykit plan --json | head -1`): stop quietly, and
    keep Python's exit-time flush from reporting it again."""
    if env.stdout is sys.__stdout__:
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.__stdout__.fileno())
    return ExitCode.BROKEN_PIPE


def _run(args: list[str], debug: bool, env: Environment) -> int:
    """The app, with every exception turned into its documented exit code."""
    try:
        rc = command().main(args=args, standalone_mode=False, prog_name="deploykit",
                            terminal_width=help_width())
        # typer.Exit(code) comes back as the return value
        return rc if isinstance(rc, int) else ExitCode.OK
    except InventoryError as exc:
        for problem in exc.problems:
            console().print(printable(str(problem)), markup=False, soft_wrap=True)
        console().print(f"[red]{len(exc.problems)} problem(s) in the inventory; "
                        "no host was contacted.[/]")
        return exc.exit_code
    except DeployKitError as exc:
        # messages quote paths and values: `[/]` in one is text, never rich markup
        console().print(f"[red]error:[/] {escape(printable(exc.message))}", markup=True)
        if exc.hint:
            console().print(f"hint: {printable(exc.hint)}", markup=False)
        if debug:
            console().print_exception()
        return exc.exit_code
    except KeyboardInterrupt:
        return ExitCode.INTERRUPTED
    except (BrokenPipeError, ReaderGone):
        return _reader_gone(env)
    except typer.Exit as exc:
        return int(exc.exit_code)
    except SystemExit as exc:  # sys.exit() somewhere below: the status Python would exit with
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or ExitCode.OK
        env.stderr.write(f"{exc.code}\n")
        return ExitCode.INTERNAL_ERROR
    except Exception as exc:
        # Typer vendors Click; its usage errors carry show() and their own exit code.
        if hasattr(exc, "show") and hasattr(exc, "exit_code"):
            exc.show(file=env.stderr)
            return ExitCode.USAGE
        if type(exc).__name__ == "Abort":
            return ExitCode.INTERRUPTED
        console().print(f"[red]internal error:[/] {exc.__class__.__name__}: "
                        f"{escape(str(exc))}")
        if debug:
            console().print_exception()
        else:
            console().print("run again with --debug for the traceback")
        return ExitCode.INTERNAL_ERROR
