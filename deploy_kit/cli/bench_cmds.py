"""bench: measure the cache tier against the alternative, in the same run."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from deploy_kit.cli.options import InventoryOpt, VaultOpt
from deploy_kit.console import console

bench_app = typer.Typer(no_args_is_help=True, help="Measure the cache tier.")


@bench_app.command("storage")
def bench_storage(inventory: InventoryOpt,
                  threads: Annotated[str, typer.Option(help="thread sweep")] = "1,4,8",
                  objects: Annotated[int, typer.Option(help="objects per step")] = 8,
                  out: Annotated[Path, typer.Option(help="JSON + PNG here")] = Path(
                      "runs/bench-storage"),
                  vault_password_file: VaultOpt = None) -> None:
    """Chunk-sized PUT/GET/HEAD through the S3 name: awscrt vs boto3, thread sweep."""
    from deploy_kit.bench.storage import describe, run
    from deploy_kit.config.open import open_site

    sweep = [int(t) for t in threads.split(",") if t.strip()]
    with console.status("measuring S3 through the name…"):
        result = run(open_site(inventory, vault_password_file), sweep, objects, out)
    for line in describe(result):
        console.print(line, markup=False, soft_wrap=True)
    console.print(f"wrote {', '.join(result['files'])}")
