"""The `deploykit` command line. Exceptions become exit codes here and nowhere else."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from deploy_kit import __version__
from deploy_kit.console import console
from deploy_kit.errors import DeployKitError, InventoryError
from deploy_kit.exit_codes import ExitCode

app = typer.Typer(no_args_is_help=True, pretty_exceptions_enable=False, add_completion=False,
                  help="Provision and verify a shared KV-cache tier: Ceph RGW (S3), "
                       "Consul + CoreDNS, vLLM + LMCache.\n\nExit codes: 0 ok, 1 internal "
                       "error, 2 usage, 3 invalid inventory, 4 Ansible task failed, 5 hosts "
                       "unreachable, 6 verify failed, 7 missing prerequisite, 130 interrupted.")

InventoryOpt = Annotated[str, typer.Option("--inventory", "-i",
                                           help="inventory name (inventory/<name>) or path")]
VaultOpt = Annotated[Path | None, typer.Option("--vault-password-file",
                                               help="decrypt group_vars vault files")]


@app.command()
def plan(inventory: InventoryOpt,
         as_json: Annotated[bool, typer.Option("--json", help="JSON on stdout")] = False,
         vault_password_file: VaultOpt = None) -> None:
    """Sizing and rollout plan: bytes per token, chunk objects, DRAM, pools, DNS, order."""
    from deploy_kit.cli.plan_view import show_plan
    from deploy_kit.config.open import open_site
    from deploy_kit.plan.plan import build_plan

    result = build_plan(open_site(inventory, vault_password_file))
    if as_json:
        sys.stdout.write(json.dumps(result.to_dict(), indent=2) + "\n")
    else:
        show_plan(result, console)


@app.command()
def render(inventory: InventoryOpt,
           out: Annotated[Path, typer.Option("--out", "-o", help="output directory")],
           vault_password_file: VaultOpt = None) -> None:
    """Write every file each host would receive to OUT/<host>/<path> (+ OUT/_cluster)."""
    from deploy_kit.config.open import open_site
    from deploy_kit.render.files import render_site, write_tree

    site = open_site(inventory, vault_password_file)
    count = write_tree(render_site(site), out)
    console.print(f"wrote {count} files for {len(site.hosts)} hosts to {out}")
    if site.secrets_locked:
        console.print("[yellow]note:[/] vault is encrypted and no password was given: "
                      "credentials files hold <vault:…> markers")


@app.command()
def validate(inventory: InventoryOpt, vault_password_file: VaultOpt = None) -> None:
    """Check the inventory only (every problem at once; exit 3 when any)."""
    from deploy_kit.config.open import open_site

    site = open_site(inventory, vault_password_file)
    console.print(f"[green]ok[/] {site.root}: {len(site.hosts)} hosts valid")


@app.command()
def version() -> None:
    """Print deploykit's version."""
    sys.stdout.write(f"deploykit {__version__}\n")


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the Typer app and turn deploykit errors into documented exit codes."""
    debug = "--debug" in (argv if argv is not None else sys.argv)
    args = [a for a in (argv if argv is not None else sys.argv[1:]) if a != "--debug"]
    try:
        app(args=args, standalone_mode=False)
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
