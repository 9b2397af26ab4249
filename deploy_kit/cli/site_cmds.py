"""plan, render, validate: the inventory alone, no host contacted (plan --upgrade reads
each host's converge record)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from deploy_kit.cli.option_group import READER, TRAILING, option_group
from deploy_kit.cli.options import InventoryOpt
from deploy_kit.cli.secrets_view import note_not_generated
from deploy_kit.console import console, data_console, stdout
from deploy_kit.flows.request import VaultOptions

if TYPE_CHECKING:
    from deploy_kit.render.tls import Sources

CHECK_TLS_DIR = ".deploykit-check-tls"  # render --for-roles --check: would-be TLS material


@option_group(READER, after="per_host")
def plan(inventory: InventoryOpt,
         as_json: Annotated[bool, typer.Option("--json", help="JSON on stdout")] = False,
         per_host: Annotated[bool, typer.Option(
             "--per-host", help="a serving-host row per host (default: one row per set of "
                                "hosts whose rows are identical, named as Ansible ranges)")
         ] = False,
         *, vault: VaultOptions,
         upgrade: Annotated[bool, typer.Option(
             "--upgrade", help="also read each host's converge record (read-only, through "
                               "the inventory's connection, as verify) and show the "
                               "version changes `up` would roll and whether LMCache's "
                               "cache goes cold")] = False) -> None:
    """Sizing and rollout plan: bytes per token, chunk objects, DRAM, pools, DNS, order.
    Reads the inventory alone, unless --upgrade."""
    from deploy_kit.cli.plan_view import show_plan
    from deploy_kit.core.envelope import dumps
    from deploy_kit.flows.upgrade import pending_upgrade
    from deploy_kit.ops.site import open_site
    from deploy_kit.ops.tls import refuse_bad_ca
    from deploy_kit.plan.plan import build_plan

    secrets = vault.secrets()
    site = open_site(inventory, secrets)
    refuse_bad_ca(site)  # the CA `up` would refuse: exit 3 here too
    result = build_plan(site)
    pending = pending_upgrade(site) if upgrade else None
    if as_json:
        payload = result.to_dict()
        if pending is not None:
            payload["upgrade"] = pending
        del payload["schema"]  # the envelope's schema says the version
        payload["deployment"] = payload.pop("site")  # the envelope's site is the name
        stdout().write(dumps("plan", 2, site.name, payload))
    else:
        show_plan(result, data_console(), per_host=per_host)
        note_not_generated(site, data_console())  # part of the plan: stdout
        if pending is not None:
            lines = pending["lines"] or ["upgrade: none (every host's record has the "
                                         "inventory's versions)"]
            for line in [*lines, *pending["waves"]]:
                data_console().print(line, markup=False, soft_wrap=True)


@option_group(READER, after="out")
def render(inventory: InventoryOpt,
           out: Annotated[Path, typer.Option("--out", "-o", metavar="DIR",
                                                      help="output directory")],
           vault: VaultOptions,
           for_roles: Annotated[bool, typer.Option(
               "--for-roles", hidden=True, help="the playbooks' tree: no secret files")] = False,
           check: Annotated[bool, typer.Option(
               "--check", hidden=True, help="with --for-roles, for a check-mode run: write "
                                            "no CA or certificate beside the inventory")] = False
           ) -> None:
    """Write every file each host would receive to OUT/<host>/<path> (+ OUT/_cluster).
    OUT is replaced whole: a new or empty directory, or one an earlier render wrote."""
    import shutil
    import tempfile

    from deploy_kit.ops.outdir import check_replaceable, replace_tree
    from deploy_kit.ops.rundir import role_tree, with_settings
    from deploy_kit.ops.site import open_site
    from deploy_kit.ops.tls import refuse_bad_ca
    from deploy_kit.render.files import render_site

    out = Path(os.path.abspath(out))
    check_replaceable(out)  # before anything is read or issued
    secrets = vault.secrets()
    site = open_site(inventory, secrets)
    refuse_bad_ca(site)  # the CA `up` would refuse: exit 3 here too
    with tempfile.TemporaryDirectory(prefix="deploykit-check-") as scratch:
        sources = None
        if for_roles:  # the render play of a plain ansible-playbook run: issue as `up` does
            from deploy_kit.flows.converge import issue_tls

            # check mode: the would-be material goes beside the tree (the play's private
            # temporary directory), never beside the inventory
            sources = issue_tls(site, Path(scratch) / "tls" if check else None)
            if sources is not None:
                sources = _moved(sources, Path(scratch) / "tls", out / CHECK_TLS_DIR)
        tree = role_tree(site, sources) if for_roles else with_settings(site, render_site(site))

        def add_check_tls(tmp: Path) -> None:
            if sources is not None:
                shutil.copytree(Path(scratch) / "tls", tmp / CHECK_TLS_DIR)

        count = replace_tree(tree, out, add_check_tls)
    console().print(f"wrote {count} files for {len(site.hosts)} hosts to {out}")
    if not for_roles:
        note_not_generated(site)
    if site.secrets_locked and not for_roles:
        console().print("[yellow]note:[/] vault is encrypted and no password was given: "
                        "credentials files hold <vault:…> markers")


def _moved(sources: Sources, scratch: Path, target: Path) -> Sources:
    """The same sources with what lies in `scratch` named at `target` (where it is copied)."""
    from deploy_kit.render.tls import Sources

    def at(path: Path) -> Path:
        return target / path.relative_to(scratch) if path.is_relative_to(scratch) else path

    return Sources(at(sources.ca_cert), {h: at(p) for h, p in sources.host_pems.items()},
                   at(sources.consul_ca) if sources.consul_ca else None,
                   {h: at(p) for h, p in sources.consul_pems.items()})


@option_group(TRAILING)
def validate(inventory: InventoryOpt, vault: VaultOptions) -> None:
    """Check the inventory only (every problem at once; exit 3 when any)."""
    from deploy_kit.ops.site import open_site
    from deploy_kit.ops.tls import refuse_bad_ca

    secrets = vault.secrets()
    site = open_site(inventory, secrets)
    refuse_bad_ca(site)  # the CA `up` would refuse: exit 3 here too
    console().print(f"[green]ok[/] {site.root}: {len(site.hosts)} hosts valid")
    note_not_generated(site)


@option_group(TRAILING)
def wheelhouse(inventory: InventoryOpt,
               out: Annotated[Path, typer.Option(
                   "--out", "-o", metavar="DIR", help="where the wheelhouses go")] = Path(
                   "wheelhouse"),
               python: Annotated[str, typer.Option(metavar="VERSION",
                                                help="the serving hosts' python3")] = "3.11",
               glibc: Annotated[str, typer.Option(metavar="VERSION",
                                               help="the serving hosts' glibc")] = "2.36",
               *, vault: VaultOptions) -> None:
    """Download the serving hosts' pinned vLLM + LMCache stack once (air-gapped installs):
    one directory of wheels with a hash-pinned requirements.lock per accelerator and version.
    Point vllm_wheel_dir (and lmcache_wheel_dir) at it; hosts then install offline."""
    from deploy_kit.ops.site import open_site
    from deploy_kit.ops.wheelhouse import Recipe, build

    if not all(part.isdigit() for part in (*python.split("."), *glibc.split("."))):
        raise typer.BadParameter("--python and --glibc take versions such as 3.11 and 2.36")
    secrets = vault.secrets()
    site = open_site(inventory, secrets)
    recipes = sorted({Recipe(h.config.vllm_accelerator or "cuda", h.config.vllm_version,
                             h.config.lmcache_version, python, glibc,
                             nixl=h.config.lmcache_mode == "nixl")
                      for h in site.group("vllm")}, key=lambda r: r.name)
    if not recipes:
        console().print("no vllm hosts in the inventory: nothing to download")
        return
    for recipe in recipes:
        console().print(f"… {recipe.name}")
        target = build(recipe, out)
        console().print(f"[green]ok[/] {target.resolve()}  (vllm_wheel_dir and "
                        f"lmcache_wheel_dir for {recipe.accelerator} hosts)")
