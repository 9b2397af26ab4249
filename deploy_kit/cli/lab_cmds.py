"""lab up|down|status: the local lab on this machine (root)."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer

from deploy_kit.console import console
from deploy_kit.exit_codes import ExitCode

lab_app = typer.Typer(no_args_is_help=True, help="The local lab: real Ceph and "
                      "systemd-nspawn hosts on this machine (needs root).")


@lab_app.command("up")
def lab_up(hosts: Annotated[int, typer.Option("--hosts", min=3, max=8)] = 4,
           serving: Annotated[bool, typer.Option(
               "--serving/--no-serving",
               help="lab3/lab4 run vLLM (CPU) + LMCache for real (about 7 GB of memory "
                    "each once `up` starts them); --no-serving: units and config only")] = True,
           ) -> None:
    """Bring the lab up (idempotent) and write inventory/lab/."""
    from deploy_kit.lab import lab

    steps = lab.up(hosts, report=lambda m: console.print(m, markup=False),
                   with_serving=serving)
    for step in steps:
        console.print(f"  {step.name}: {step.seconds:.1f} s")
    console.print(f"[green]lab up[/]: inventory at {lab.lab_inventory_dir()}")


@lab_app.command("down")
def lab_down() -> None:
    """Remove everything the lab made (safe to run twice)."""
    from deploy_kit.lab import lab

    lab.down(report=lambda m: console.print(m, markup=False))


@lab_app.command("status")
def lab_status(as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Exit 0 when the lab is up, 7 when it is not."""
    from deploy_kit.lab import lab

    info = lab.status()
    if as_json:
        sys.stdout.write(json.dumps(info, indent=2) + "\n")
    else:
        for h in info["hosts"]:
            console.print(f"{h['name']} {h['address']} ssh={'up' if h['ssh'] else 'down'}")
        console.print("lab is up" if info["up"] else "lab is down")
    if not info["up"]:
        raise typer.Exit(ExitCode.ENVIRONMENT)
