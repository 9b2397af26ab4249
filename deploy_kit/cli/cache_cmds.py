"""cache stats|purge: the LMCache objects in the bucket."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from deploy_kit.cli.option_group import TRAILING, option_group
from deploy_kit.cli.options import InventoryOpt, ModelOpt
from deploy_kit.console import console, data_console, stdout
from deploy_kit.core.errors import DeployKitError
from deploy_kit.flows.request import ConnectionOptions, VaultOptions, reached_site

cache_app = typer.Typer(no_args_is_help=True, help="The LMCache objects in the bucket.")


@cache_app.command("stats")
@option_group(TRAILING)
def cache_stats(inventory: InventoryOpt, model: ModelOpt = None,
                as_json: Annotated[bool, typer.Option("--json", help="JSON on stdout")] = False,
                *, vault: VaultOptions, connection: ConnectionOptions) -> None:
    """Count, bytes and age of cache objects per model / TP×PP / dtype."""
    from deploy_kit.cache.keys import aggregate
    from deploy_kit.cache.store import list_model_objects, list_objects, open_bucket
    from deploy_kit.console import human_bytes

    with reached_site(inventory, vault, connection) as site:
        bucket = open_bucket(site)
        groups, foreign = aggregate(list_model_objects(bucket, model) if model else
                                    list_objects(bucket))
        rows = [{"model": g.model, "world_size": g.world_size, "dtype": g.dtype,
                 "objects": g.objects, "chunks": len(g.chunks), "bytes": g.bytes,
                 "oldest": g.oldest.isoformat() if g.oldest else None,
                 "newest": g.newest.isoformat() if g.newest else None} for g in groups]
        if as_json:
            from deploy_kit.core.envelope import dumps

            stdout().write(dumps("cache-stats", 1, site.name,
                                 {"bucket": bucket.host, "groups": rows,
                                  "other_objects": len(foreign)}))
            return
        from rich.table import Table

        table = Table(title=f"s3://{bucket.host}", title_justify="left")
        for col in ("model", "TP×PP", "dtype", "objects", "chunks", "bytes", "oldest", "newest"):
            table.add_column(col)
        for r in rows:
            table.add_row(str(r["model"]), str(r["world_size"]), str(r["dtype"]), str(r["objects"]),
                          str(r["chunks"]), human_bytes(int(str(r["bytes"]))),
                          str(r["oldest"])[:19], str(r["newest"])[:19])
        data_console().print(table)
        if foreign:
            console().print(f"{len(foreign)} object(s) not named like LMCache chunks")


@cache_app.command("purge")
@option_group(TRAILING)
def cache_purge(inventory: InventoryOpt,
                model: Annotated[str, typer.Option("--model", metavar="MODEL",
                                                         help="model string as served")],
                yes: Annotated[bool, typer.Option("--yes", help="do not ask")] = False,
                *, vault: VaultOptions, connection: ConnectionOptions) -> None:
    """Delete every cache object of one model (e.g. between TTFT runs)."""
    from deploy_kit.cache.store import delete_objects, list_model_objects, open_bucket

    with reached_site(inventory, vault, connection) as site:
        bucket = open_bucket(site)
        objects = list_model_objects(bucket, model)
        if not objects:
            console().print(f"no cache objects for {model}")
            return
        total = sum(o.size for o in objects)
        if not yes:
            if not sys.stdin.isatty():
                raise typer.BadParameter("refusing to delete without a terminal; pass --yes",
                                         param_hint="--yes")
            typer.confirm(f"delete {len(objects)} objects ({total:,} B) of {model}?", abort=True)
        deleted = delete_objects(bucket, [o.key for o in objects])
        console().print(f"deleted {deleted} of {len(objects)} objects of {model}")
        if deleted != len(objects):
            raise DeployKitError(f"{len(objects) - deleted} objects could not be deleted")
        # LMCache 0.5.6 remembers every object's size for the life of its process (PR #4745)
        sources = " ".join(f"-i {i}" for i in inventory)
        console().print(f"running LMCache servers still believe these objects exist: their "
                        f"next hits on them 404 and recompute until they restart; `deploykit "
                        f"up {sources} --restart-serving` restarts them one host at a time",
                        markup=False, soft_wrap=True)
