"""`deploykit secrets`: where each secret of a site comes from; generate and rotate the ones
deploykit keeps in its store (deploy_kit/ops/secrets_store.py). Never prints a value."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from deploy_kit.cli.options import (
    AskVaultOpt,
    InventoryOpt,
    VaultIdOpt,
    VaultOptions,
    VaultPasswordFileOpt,
)
from deploy_kit.config.site import Site
from deploy_kit.console import console, data_console, stdout
from deploy_kit.core.errors import DeployKitError
from deploy_kit.core.exit_codes import ExitCode

secrets_app = typer.Typer(
    invoke_without_command=True,
    help="The site's secrets: where each comes from (vault, inventory, or deploykit's "
         "generated store <inventory>/.deploykit-secrets/), never their values; generate "
         "and rotate the generated ones (docs/security.md).")


class SecretRefused(DeployKitError):
    """A secret this verb may not change (set by the inventory, or Consul-bound)."""

    exit_code = ExitCode.USAGE


@dataclass(frozen=True)
class Origin:
    name: str
    kind: str  # vault | environment | inventory | generated | missing
    where: str  # a file (and key), the store path, or what will happen


def _open(inventory: list[str], vault: VaultOptions) -> Site:
    from deploy_kit.config.open import open_site

    # the inventory's own values: the store is read apart, never merged in
    return open_site(inventory, vault.secrets())


def _kind(path: str, key: str) -> tuple[str, str]:
    """Where the inventory's value of `key` in `path` lives: ("vault", how) for a vault file,
    an inline `!vault` value or a `{{ var }}` reference (the site only accepts references
    that end in a vault: config/site.py _secret_origin), ("environment", ...) for an env
    lookup, else ("inventory", "")."""
    try:
        text = Path(path).read_text(errors="replace")[:1_000_000]
    except OSError:
        return "inventory", ""
    if text.lstrip().startswith("$ANSIBLE_VAULT"):
        return "vault", ""
    line = re.search(rf"^\s*{re.escape(key)}\s*[:=]\s*(.*)$", text, re.MULTILINE)
    value = line.group(1) if line else ""
    if value.startswith("!vault"):
        return "vault", ""
    if "lookup(" in value and "env" in value:
        return "environment", " (an env lookup)"
    if ref := re.search(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}", value):
        return "vault", f" -> {ref.group(1)}"
    return "inventory", ""


def origins(site: Site) -> list[Origin]:
    """Each secret the site uses and where it comes from."""
    from deploy_kit.config import site_secrets
    from deploy_kit.ops import secrets_store

    stored = secrets_store.read_store(site)
    store = secrets_store.store_path(site)
    out: list[Origin] = []
    for name in site_secrets.used(site):
        given = sorted({h.sources[name] for h in site.hosts.values() if name in h.sources})
        lacking = site_secrets.hosts_lacking(site, name)
        for path in given:
            kind, how = _kind(path, name)
            out.append(Origin(name, kind, f"{path}:{name}{how}"))
        if lacking:
            note = "" if not given else f" (for {', '.join(lacking[:3])}" + (
                f" and {len(lacking) - 3} more)" if len(lacking) > 3 else ")")
            out.append(Origin(name, "generated", f"{store}{note}") if name in stored else
                       Origin(name, "missing", f"generated on first `deploykit up`{note}"))
    return out


def note_not_generated(site: Site, out: Console | None = None) -> None:
    """Read-only verbs (validate, plan, render) say what the next `up` would generate;
    they never write the store (the rendered files hold no secret value either)."""
    from deploy_kit.ops import secrets_store

    missing = secrets_store.not_generated(site)
    if missing:
        (out or console()).print(f"secrets: {', '.join(missing)} not generated yet: the first "
                        f"`deploykit up` writes them to {secrets_store.store_path(site)} "
                        "(`deploykit secrets` lists every source)")


def _show(inventory: list[str], vault: VaultOptions, as_json: bool) -> None:
    site = _open(inventory, vault)
    rows = origins(site)
    if as_json:
        from deploy_kit.core.envelope import dumps

        stdout().write(dumps("secrets", 1, site.name, {"secrets": [
            {"name": o.name, "source": o.kind, "where": o.where} for o in rows]}))
        return
    if not rows:
        console().print(f"{site.root}: no secret in use (every secure default opted out)")
        return
    from rich.table import Table

    table = Table(title=f"secrets of {site.root} (values never shown)", title_justify="left")
    for col in ("secret", "source", "where"):
        table.add_column(col)
    for o in rows:
        table.add_row(o.name, o.kind, o.where)
    data_console().print(table)


AsJson = Annotated[bool, typer.Option("--json", help="JSON on stdout (no values either)")]


@secrets_app.callback()
def secrets_main(ctx: typer.Context,
                 inventory: Annotated[list[str] | None, typer.Option(
                     "--inventory", "-i", metavar="SITE",
                     help="without a subcommand: list this site's secrets")] = None,
                 as_json: AsJson = False, vault_id: VaultIdOpt = None,
                 vault_password_file: VaultPasswordFileOpt = None,
                 ask_vault_pass: AskVaultOpt = False) -> None:
    """`deploykit secrets -i SITE` is `deploykit secrets list -i SITE`."""
    if ctx.invoked_subcommand is not None:
        return
    if not inventory:
        console().print(ctx.get_help())
        raise typer.Exit(int(ExitCode.USAGE))
    _show(inventory, VaultOptions.of(vault_id, vault_password_file, ask_vault_pass), as_json)


@secrets_app.command("list")
def secrets_list(inventory: InventoryOpt, as_json: AsJson = False, vault_id: VaultIdOpt = None,
                 vault_password_file: VaultPasswordFileOpt = None,
                 ask_vault_pass: AskVaultOpt = False) -> None:
    """Each secret the site uses and where it comes from: the vault (file:key), the
    inventory (file:key), deploykit's generated store, or "missing: generated on first
    up". Never a value. Writes nothing."""
    _show(inventory, VaultOptions.of(vault_id, vault_password_file, ask_vault_pass), as_json)


@secrets_app.command("generate")
def secrets_generate(inventory: InventoryOpt, vault_id: VaultIdOpt = None,
                     vault_password_file: VaultPasswordFileOpt = None,
                     ask_vault_pass: AskVaultOpt = False) -> None:
    """Generate the secrets the site needs and neither the inventory nor the store holds,
    as the first `deploykit up` does: for a plain ansible-playbook or AWX run, which then
    takes `-e @<inventory>/.deploykit-secrets/secrets.yml`."""
    from deploy_kit.ops import secrets_store

    site = _open(inventory, VaultOptions.of(vault_id, vault_password_file, ask_vault_pass))
    fill = secrets_store.ensure(site)
    path = secrets_store.store_path(site)
    for name in fill.generated:
        console().print(f"generated {name} in {path}")
    if not fill.generated:
        console().print(f"nothing to generate: {len(fill.values)} generated secret(s) already "
                        f"in {path}, the rest from the inventory" if fill.values else
                        "nothing to generate: the inventory sets every secret the site uses")


@secrets_app.command("rotate")
def secrets_rotate(names: Annotated[list[str], typer.Argument(
                       metavar="NAME", help="secrets to regenerate (vllm_api_key)")],
                   inventory: InventoryOpt, vault_id: VaultIdOpt = None,
                   vault_password_file: VaultPasswordFileOpt = None,
                   ask_vault_pass: AskVaultOpt = False) -> None:
    """Regenerate generated secrets in the store; `deploykit up` then rolls them out (vLLM
    restarts host by host: requests with the old key fail meanwhile; rolling rotation
    without failed requests is issue 35's work). Values from the inventory or vault are
    rotated there. Consul's tokens and gossip key are refused: after the ACL bootstrap a
    plain `up` cannot replace them without breaking or weakening the cluster."""
    from deploy_kit.config import site_secrets
    from deploy_kit.ops import secrets_store

    site = _open(inventory, VaultOptions.of(vault_id, vault_password_file, ask_vault_pass))
    by_name = {o.name: o for o in origins(site)
               if o.kind in ("vault", "environment", "inventory")}
    used = site_secrets.used(site)
    for name in dict.fromkeys(names):
        if name not in site_secrets.GENERATED:
            raise SecretRefused(f"{name} is not a secret deploykit generates",
                                hint="generated: " + ", ".join(site_secrets.GENERATED))
        if name not in used:
            raise SecretRefused(f"{name} is not used by this site's settings",
                                hint="`deploykit secrets list` shows the ones it uses")
        if name in by_name:
            raise SecretRefused(f"{name} comes from {by_name[name].kind} "
                                f"{by_name[name].where}",
                                hint="rotate it there, then run `deploykit up`")
        if name in site_secrets.NOT_ROTATABLE:
            raise SecretRefused(f"{name} cannot be rotated by `deploykit up`: "
                                f"{site_secrets.NOT_ROTATABLE[name]}",
                                hint="rotate it with Consul's own API (issue 35 adds this)")
    secrets_store.rotate(site, list(dict.fromkeys(names)))
    for name in dict.fromkeys(names):
        console().print(f"rotated {name} in {secrets_store.store_path(site)}; "
                        f"`deploykit up -i {site.inventory_source}` rolls it out")
