"""The `deploykit` command line: verbs registered from one module per group.

Exceptions become exit codes here and nowhere else.
"""

from __future__ import annotations

import sys

import typer

from deploy_kit import __version__
from deploy_kit.cli import bench_cmds, cache_cmds, converge_cmds, lab_cmds, site_cmds, verify_cmds
from deploy_kit.console import console
from deploy_kit.errors import DeployKitError, InventoryError
from deploy_kit.exit_codes import ExitCode

app = typer.Typer(no_args_is_help=True, pretty_exceptions_enable=False, add_completion=False,
                  help="Provision and verify a shared KV-cache tier: Ceph RGW (S3), "
                       "Consul + CoreDNS, vLLM + LMCache.\n\nExit codes: 0 ok, 1 internal "
                       "error, 2 usage, 3 invalid inventory, 4 Ansible task failed, 5 hosts "
                       "unreachable, 6 verify failed, 7 missing prerequisite, 130 interrupted.")

for verb in (site_cmds.plan, site_cmds.render, site_cmds.validate, converge_cmds.up,
             site_cmds.wheelhouse, converge_cmds.down, verify_cmds.verify, verify_cmds.doctor):
    app.command()(verb)
app.add_typer(cache_cmds.cache_app, name="cache")
app.add_typer(bench_cmds.bench_app, name="bench")
app.add_typer(lab_cmds.lab_app, name="lab")


@app.command()
def version() -> None:
    """Print deploykit's version."""
    sys.stdout.write(f"deploykit {__version__}\n")


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the Typer app and turn deploykit errors into documented exit codes."""
    debug = "--debug" in (argv if argv is not None else sys.argv)
    args = [a for a in (argv if argv is not None else sys.argv[1:]) if a != "--debug"]
    try:
        rc = app(args=args, standalone_mode=False)
        if isinstance(rc, int) and rc:  # typer.Exit(code) comes back as the return value
            raise SystemExit(rc)
    except InventoryError as exc:
        for problem in exc.problems:
            console.print(str(problem), markup=False, soft_wrap=True)
        console.print(f"[red]{len(exc.problems)} problem(s) in the inventory; "
                      "no host was contacted.[/]")
        raise SystemExit(exc.exit_code) from None
    except DeployKitError as exc:
        console.print(f"[red]error:[/] {exc.message}", markup=True)
        if exc.hint:
            console.print(f"hint: {exc.hint}")
        if debug:
            console.print_exception()
        raise SystemExit(exc.exit_code) from None
    except KeyboardInterrupt:
        raise SystemExit(ExitCode.INTERRUPTED) from None
    except typer.Exit as exc:
        raise SystemExit(exc.exit_code) from None
    except SystemExit:
        raise
    except Exception as exc:
        # Typer vendors Click; its usage errors carry show() and their own exit code.
        if hasattr(exc, "show") and hasattr(exc, "exit_code"):
            exc.show()
            raise SystemExit(ExitCode.USAGE) from None
        if type(exc).__name__ == "Abort":
            raise SystemExit(ExitCode.INTERRUPTED) from None
        console.print(f"[red]internal error:[/] {exc.__class__.__name__}: {exc}")
        if debug:
            console.print_exception()
        else:
            console.print("run again with --debug for the traceback")
        raise SystemExit(ExitCode.INTERNAL_ERROR) from None
