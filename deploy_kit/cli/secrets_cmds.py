"""`deploykit secrets`: where each secret of a site comes from; generate and rotate the ones
deploykit keeps in its store (deploy_kit/ops/secrets_store.py). Never prints a value."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from deploy_kit.cli.option_group import ROTATE, TRAILING, option_group
from deploy_kit.config.site import Site
from deploy_kit.console import console, data_console, stdout
from deploy_kit.core.errors import DeployKitError
from deploy_kit.core.exit_codes import ExitCode
from deploy_kit.flows.request import AnsibleOptions, ConnectionOptions, VaultOptions

secrets_app = typer.Typer(
    invoke_without_command=True,
    help="The site's secrets: where each comes from (vault, inventory, or the secrets "
         "deploykit generated: the vault file <inventory>/.deploykit-secrets.vault.yml, or "
         "the local store <inventory>/.deploykit-secrets/ of a site without a vault), never "
         "their values; generate, rotate and move the generated ones (docs/security.md). "
         "-i and the vault flags go before or after the subcommand.")


class SecretRefused(DeployKitError):
    """A secret this verb may not change (set by the inventory, or Consul-bound)."""

    exit_code = ExitCode.USAGE


@dataclass(frozen=True)
class Origin:
    name: str
    kind: str  # vault | environment | inventory | generated | missing | locked
    where: str  # a file (and key), the store path, or what will happen


@dataclass(frozen=True)
class Given:
    """What `deploykit secrets -i SITE [vault flags] SUBCOMMAND` gave before the
    subcommand: each subcommand takes it as if given after."""

    inventory: tuple[str, ...] = ()
    vault: VaultOptions = field(default_factory=VaultOptions)


OptInventory = Annotated[list[str] | None, typer.Option(
    "--inventory", "-i", metavar="SITE",
    help="inventory name (inventory/<name>) or path; repeat to merge several sources; "
         "also accepted before the subcommand (`deploykit secrets -i SITE generate`)")]


def given(ctx: typer.Context, inventory: list[str] | None,
          vault: VaultOptions) -> tuple[list[str], VaultOptions]:
    """The subcommand's -i and vault flags with those given before it."""
    before = ctx.obj if isinstance(ctx.obj, Given) else Given()
    sites = [*before.inventory, *(inventory or [])]
    if not sites:
        raise typer.BadParameter("Missing option '--inventory' / '-i' (before or after the "
                                 "subcommand)", param_hint="--inventory")
    merged = VaultOptions(before.vault.vault_ids + vault.vault_ids,
                          before.vault.password_files + vault.password_files,
                          before.vault.ask or vault.ask)
    return sites, merged


def _open(inventory: list[str], vault: VaultOptions) -> Site:
    from deploy_kit.ops.site import open_site

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

    try:
        stored: dict[str, str] | None = secrets_store.read_store(site)
    except secrets_store.StoreLocked:  # the names are unknown until the vault opens
        stored = None
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
            if stored is None:
                out.append(Origin(name, "locked", f"{store}{note} (pass the vault flags)"))
            elif name in stored:
                out.append(Origin(name, "generated", f"{store}{note}"))
            else:
                out.append(Origin(name, "missing", f"generated on first `deploykit up`{note}"))
    return out


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
@option_group(TRAILING)
def secrets_main(ctx: typer.Context,
                 inventory: Annotated[list[str] | None, typer.Option(
                     "--inventory", "-i", metavar="SITE",
                     help="without a subcommand: list this site's secrets; with one: the "
                          "site it works on (as if given after it)")] = None,
                 as_json: AsJson = False, *, vault: VaultOptions) -> None:
    """`deploykit secrets -i SITE` is `deploykit secrets list -i SITE`;
    `deploykit secrets -i SITE generate` is `deploykit secrets generate -i SITE`."""
    if ctx.invoked_subcommand is not None:
        ctx.obj = Given(tuple(inventory or ()), vault)
        return
    if not inventory:
        console().print(ctx.get_help())
        raise typer.Exit(int(ExitCode.USAGE))
    _show(inventory, vault, as_json)


@secrets_app.command("list")
@option_group(TRAILING)
def secrets_list(ctx: typer.Context, inventory: OptInventory = None, as_json: AsJson = False,
                 *, vault: VaultOptions) -> None:
    """Each secret the site uses and where it comes from: the vault (file:key), the
    inventory (file:key), deploykit's generated secrets (the vault file or the local
    store), or "missing: generated on first up". Never a value. Writes nothing."""
    _show(*given(ctx, inventory, vault), as_json)


@secrets_app.command("generate")
@option_group(TRAILING)
def secrets_generate(ctx: typer.Context, inventory: OptInventory = None, *,
                     vault: VaultOptions) -> None:
    """Generate the secrets the site needs and neither the inventory nor the store holds,
    as the first `deploykit up` does: for a plain ansible-playbook or AWX run, which then
    takes `-e @<inventory>/.deploykit-secrets.vault.yml` (the site's vault decrypts it;
    `-e @<inventory>/.deploykit-secrets/secrets.yml` for a site without a vault)."""
    from deploy_kit.ops import secrets_store

    site = _open(*given(ctx, inventory, vault))
    fill = secrets_store.ensure(site)
    path = secrets_store.store_path(site)
    for name in fill.generated:
        console().print(f"generated {name} in {path}")
    if not fill.generated:
        console().print(f"nothing to generate: {len(fill.values)} generated secret(s) already "
                        f"in {path}, the rest from the inventory" if fill.values else
                        "nothing to generate: the inventory sets every secret the site uses")
    warning = secrets_store.warning(site, str(site.inventory_source))
    if warning:
        console().print(f"[yellow]warning:[/] {escape(warning)}", soft_wrap=True)


@secrets_app.command("move")
@option_group(TRAILING)
def secrets_move(ctx: typer.Context, inventory: OptInventory = None, *,
                 vault: VaultOptions) -> None:
    """Move the local store (<inventory>/.deploykit-secrets/, written while the site had no
    vault) into the vault file <inventory>/.deploykit-secrets.vault.yml, encrypted with the
    site's vault: written, checked by decrypting it again, then the local store removed.
    Commit the vault file; every controller with the vault then has the site's secrets.
    Never shows a value."""
    from deploy_kit.ops import secrets_store

    site = _open(*given(ctx, inventory, vault))
    moved = secrets_store.move_to_vault(site)
    if moved is None:
        console().print(f"nothing to move: no local store in {secrets_store.store_dir(site)}")
        return
    path, count = moved
    console().print(f"moved {count} generated secret(s) into {path} and removed "
                    f"{secrets_store.store_dir(site)}: commit {path.name} with the inventory")


@secrets_app.command("rotate")
@option_group(ROTATE, without=("limit", "tags", "skip_tags", "diff", "extra_vars",
                               "print_command"))
def secrets_rotate(
        ctx: typer.Context,
        what: Annotated[str, typer.Argument(
            metavar="WHAT", help="s3 | vllm-api-key | consul-tokens | gossip | l2-key")],
        inventory: OptInventory = None, *, vault: VaultOptions, ansible: AnsibleOptions,
        connection: ConnectionOptions,
        yes: Annotated[bool, typer.Option(
            "--yes", "-y", help="do not ask before restarting services")] = False,
        finish: Annotated[bool, typer.Option(
            "--finish", help="vllm-api-key: end the rotation (the clients use the new key): "
                             "the old key is refused from then on")] = False,
        keep_owner_key: Annotated[bool, typer.Option(
            "--keep-owner-key", help="s3: rotate only the serving identity's key, not the "
                                     "bucket owner's")] = False,
        wait_lock: Annotated[float, typer.Option(
            "--wait-lock", min=0, metavar="SECONDS",
            help="if another run holds this site's lock, wait up to SECONDS")] = 0.0) -> None:
    """Replace a secret with no failed request: the new one is accepted beside the old one,
    rolled to its hosts one at a time behind the health gates, then the old one revoked
    (docs/day2.md, "Rotating secrets"). s3: a second key for the serving S3 identity, each
    serving host restarted onto it, then the old key deleted (and the bucket owner's key
    replaced). vllm-api-key: every instance accepts both keys; after the clients moved,
    `--finish` leaves only the new one. consul-tokens: new agent, service and DNS tokens
    with the same rights, set on every agent, then the old ones deleted. gossip: the new
    key installed on every member and made primary, then the old one removed. l2-key: a
    new KV encryption master key written to every encrypting serving host, each LMCache
    server restarted onto it; no overlap is possible, so every chunk already in S3 becomes
    unreadable (the cache goes cold; old objects age out by the lifecycle). Under the
    site lock, with a run record like `up`;
    asks first unless --yes or --check. A value from the vault or inventory is rotated
    there (the error says how). Never shows a value."""
    from deploy_kit.cli.rotate_args import confirm, parse_what
    from deploy_kit.flows import rotate

    sites, vault = given(ctx, inventory, vault)
    inventory = sites
    chosen = parse_what(what)
    if finish and chosen is not rotate.What.vllm_api_key:
        raise typer.BadParameter("--finish ends a vllm-api-key rotation only",
                                 param_hint="--finish")

    def ask(question: str) -> None:
        confirm(question, yes, ansible.check)

    if chosen is rotate.What.s3:
        rotate.rotate_s3(inventory, vault, ansible, connection, wait_lock,
                         rotate_owner=not keep_owner_key, confirm=ask)
    elif chosen is rotate.What.vllm_api_key:
        rotate.rotate_vllm_key(inventory, vault, ansible, connection, wait_lock, finish,
                               origins, ask)
    elif chosen is rotate.What.l2_key:
        rotate.rotate_l2_key(inventory, vault, ansible, connection, wait_lock, origins, ask)
    else:
        rotate.rotate_consul(inventory, vault, ansible, connection, wait_lock, chosen,
                             origins, ask, management=what == "consul_acl_management_token")
