"""lab up|down|status: the local lab on this machine (root)."""

from __future__ import annotations

from typing import Annotated

import typer

from deploy_kit.console import console, stdout
from deploy_kit.core.exit_codes import ExitCode
from deploykit_lab.profiles import DEFAULT, PROFILES, Profile, profile

lab_app = typer.Typer(no_args_is_help=True, help="The local lab: real Ceph and "
                      "systemd-nspawn hosts on this machine (needs root).")


ProfileOpt = Annotated[str, typer.Option(
    "--profile", help="serving (default): lab3/lab4 run vLLM (CPU) + LMCache for real, about "
                      "7 GB of memory each, with deploykit's secure defaults (Consul ACLs, "
                      "gossip encryption, a vLLM API key: generated secrets); plain: storage "
                      "+ DNS, serving hosts get config only; secured: serving + TLS + the "
                      "Consul secrets from a vault; monitoring: serving + Prometheus on lab1 "
                      "(Consul ACLs opted out)")]


def _chosen(name: str, serving: bool) -> Profile:
    if name not in PROFILES:
        console().print(f"[red]error:[/] no lab profile {name!r}; use one of "
                      f"{', '.join(PROFILES)}")
        raise typer.Exit(ExitCode.USAGE)
    return profile("plain" if not serving else name)


@lab_app.command("up")
def lab_up(hosts: Annotated[int, typer.Option("--hosts", min=3, max=8, metavar="N",
                                                     help="lab hosts to make")] = 4,
           profile_name: ProfileOpt = DEFAULT,
           serving: Annotated[bool, typer.Option(
               "--serving/--no-serving", help="--no-serving is --profile plain")] = True,
           ) -> None:
    """Bring the lab up (idempotent) and write inventory/lab/ for this checkout."""
    from deploykit_lab import lab
    from deploykit_lab.profiles import VAULT_PASSWORD

    chosen = _chosen(profile_name, serving)
    console().print(f"lab profile {chosen.name}: {chosen.summary}", markup=False)
    steps = lab.up(hosts, report=lambda m: console().print(m, markup=False), chosen=chosen)
    for step in steps:
        console().print(f"  {step.name}: {step.seconds:.1f} s")
    console().print(f"[green]lab up[/]: inventory at {lab.lab_inventory_dir()}")
    # every profile has a vault (its generated secrets are encrypted into the inventory)
    console().print(f"the lab's vault: pass --vault-password-file {VAULT_PASSWORD} (or export "
                    f"ANSIBLE_VAULT_PASSWORD_FILE={VAULT_PASSWORD}) to every deploykit run"
                    + ("; the Consul tokens are vaulted too" if chosen.secured else ""),
                    markup=False)


@lab_app.command("prefetch")
def lab_prefetch(profile_name: ProfileOpt = DEFAULT) -> None:
    """Fill the lab's caches (packages, host image, CoreDNS, Consul, wheelhouse, model)
    without starting anything; `lab up` then only starts the lab."""
    from deploykit_lab import lab

    chosen = _chosen(profile_name, True)
    for step in lab.prefetch(chosen, report=lambda m: console().print(m, markup=False)):
        console().print(f"  {step.name}: {step.seconds:.1f} s")


@lab_app.command("down")
def lab_down() -> None:
    """Remove everything the lab made (safe to run twice)."""
    from deploykit_lab import lab

    lab.down(report=lambda m: console().print(m, markup=False))


@lab_app.command("status")
def lab_status(as_json: Annotated[bool, typer.Option(
        "--json", help="JSON on stdout")] = False) -> None:
    """Exit 0 when the lab is up, 7 when it is not."""
    from deploykit_lab import lab

    info = lab.status()
    if as_json:
        from deploy_kit.core.envelope import dumps

        stdout().write(dumps("lab-status", 1, "lab", info))
    else:
        for h in info["hosts"]:
            console().print(f"{h['name']} {h['address']} ssh={'up' if h['ssh'] else 'down'}")
        console().print("lab is up" if info["up"] else "lab is down")
    if not info["up"]:
        raise typer.Exit(ExitCode.ENVIRONMENT)
