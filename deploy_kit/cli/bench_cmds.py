"""bench: measure the cache tier against the alternative, in the same run."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from deploy_kit.cli.option_group import TRAILING, option_group
from deploy_kit.cli.options import InventoryOpt
from deploy_kit.console import console
from deploy_kit.flows.request import ConnectionOptions, VaultOptions, reached_site

bench_app = typer.Typer(no_args_is_help=True, help="Measure the cache tier.")


def require_bench_extra(*modules: str) -> None:
    """The bench verbs' own dependencies live in the `bench` extra: say so, exit 7."""
    import importlib.util

    from deploy_kit.core.errors import EnvironmentProblem

    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        raise EnvironmentProblem(f"{', '.join(missing)} not installed",
                                  hint="pip install 'deploykit[bench]'")


@bench_app.command("storage")
@option_group(TRAILING)
def bench_storage(inventory: InventoryOpt,
                  threads: Annotated[str, typer.Option(
                      metavar="LIST", help="thread sweep, e.g. 1,4,8")] = "1,4,8",
                  objects: Annotated[int, typer.Option(
                      metavar="N", help="objects per step")] = 8,
                  out: Annotated[Path, typer.Option(
                      metavar="DIR", help="JSON + PNG here")] = Path("runs/bench-storage"),
                  object_mib: Annotated[float | None, typer.Option(
                      min=0.001, max=4096, metavar="MIB",
                      help="object size instead of the plan's per-rank chunk object (e.g. "
                           "32: awscrt's multipart path, 4 parts of 8 MiB)")] = None,
                  *, vault: VaultOptions, connection: ConnectionOptions) -> None:
    """Chunk-sized PUT/GET/HEAD through the S3 name: awscrt vs boto3, thread sweep."""
    from deploy_kit.bench.storage import describe, run

    require_bench_extra("awscrt", "matplotlib")
    sweep = [int(t) for t in threads.split(",") if t.strip()]
    with reached_site(inventory, vault, connection) as site:
        with console().status("measuring S3 through the name…"):
            result = run(site, sweep, objects, out,
                         int(object_mib * 2**20) if object_mib else None)
        for line in describe(result):
            console().print(line, markup=False, soft_wrap=True)
        console().print(f"wrote {', '.join(result['files'])}")


@bench_app.command("ttft")
@option_group(TRAILING)
def bench_ttft(inventory: InventoryOpt,
               lengths: Annotated[str | None, typer.Option(
                   metavar="LIST",
                   help="context lengths in tokens, e.g. 1024,2048,4096 (default: 1K–8K on "
                        "`cpu` hosts, 4K–128K otherwise, capped by max_model_len)")] = None,
               repeats: Annotated[int, typer.Option(
                   min=1, metavar="N", help="fresh prompts per length")] = 1,
               max_tokens: Annotated[int, typer.Option(
                   min=2, metavar="N", help="tokens generated per request (TPOT)")] = 16,
               out: Annotated[Path | None, typer.Option(
                   metavar="DIR", help="ttft.json + ttft.png here (default runs/bench-ttft, "
                                       "with --via-router runs/bench-ttft-router)")] = None,
               allow_single_host: Annotated[bool, typer.Option(
                   "--allow-single-host",
                   help="run with one serving host (no remote_hit_other_host rows)")] = False,
               yes: Annotated[bool, typer.Option(
                   "--yes", help="restart the first serving host and delete this run's own "
                                 "objects without asking (any site but the lab)")] = False,
               via_router: Annotated[bool, typer.Option(
                   "--via-router",
                   help="cold and repeat through one router vs direct to the instance it "
                        "chose and to a random one; restarts and deletes nothing")] = False,
               *, vault: VaultOptions, connection: ConnectionOptions) -> None:
    """Cold prefill vs LMCache DRAM, remote (after a restart) and other-host hits, per length.

    It restarts vLLM and the LMCache server on the first serving host (each repeat) and
    deletes the objects its own prompts stored (this model's keys, newer than the run):
    outside the lab it asks first, or takes --yes. With --via-router it measures the
    routers instead (docs/benchmarks.md)."""
    import sys

    require_bench_extra("matplotlib")
    from deploy_kit.bench import ttft, ttft_report

    sweep = [int(n) for n in lengths.split(",") if n.strip()] if lengths else None
    if via_router:
        _ttft_via_router(inventory, sweep, repeats, max_tokens,
                         out or Path("runs/bench-ttft-router"), vault, connection)
        return
    out = out or Path("runs/bench-ttft")
    with reached_site(inventory, vault, connection) as site:
        console().print(ttft.plan_notice(site), markup=False, soft_wrap=True)
        if not yes and site.name != "lab":
            if not sys.stdin.isatty():
                raise typer.BadParameter("refusing to restart a serving host and delete objects "
                                         "on a live site without a terminal; pass --yes",
                                         param_hint="--yes")
            typer.confirm("go on?", abort=True)
        from deploy_kit.ops.site_lock import site_lock

        # it restarts a serving host: never beside an `up` or `down` of the same site
        with site_lock(site, "bench ttft"), console().status("TTFT protocol…") as status:
            doc = ttft.run(site, ",".join(inventory), sweep, repeats, out, max_tokens,
                           allow_single_host, log=lambda line: status.update(line))
        console().print(ttft_report.table(doc))
        for note in doc["notes"]:
            console().print(f"note: {note}", markup=False)
        console().print(f"wrote {', '.join(doc['files'])}")


def _ttft_via_router(inventory: list[str], sweep: list[int] | None, repeats: int,
                     max_tokens: int, out: Path, vault: VaultOptions,
                     connection: ConnectionOptions) -> None:
    from deploy_kit.bench import ttft_report, ttft_router

    with reached_site(inventory, vault, connection) as site:
        if not site.group("router"):
            raise typer.BadParameter("the site has no router group", param_hint="--via-router")
        with console().status("TTFT through the router…") as status:
            doc = ttft_router.run(site, ",".join(inventory), sweep, repeats, out, max_tokens,
                                  log=lambda line: status.update(line))
    console().print(ttft_report.table(doc))
    news = ttft_report.headline(doc)
    if news:
        console().print(news, markup=False)
    for note in doc["notes"]:
        console().print(f"note: {note}", markup=False)
    console().print(f"wrote {', '.join(doc['files'])}")
