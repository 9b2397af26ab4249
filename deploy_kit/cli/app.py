"""The `deploykit` command line. Exceptions become exit codes here and nowhere else."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from deploy_kit import __version__
from deploy_kit.console import console
from deploy_kit.errors import DeployKitError, InventoryError, VerifyFailed
from deploy_kit.exit_codes import ExitCode

if TYPE_CHECKING:
    from deploy_kit.config.site import Site

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


LimitOpt = Annotated[str | None, typer.Option("--limit", "-l", help="Ansible host pattern")]
TagsOpt = Annotated[list[str] | None, typer.Option("--tags", "-t", help="only these tags")]
SkipOpt = Annotated[list[str] | None, typer.Option("--skip-tags", help="skip these tags")]
CheckOpt = Annotated[bool, typer.Option("--check", "-C", help="change nothing, report")]
DiffOpt = Annotated[bool, typer.Option("--diff", "-D", help="show file differences")]
ExtraOpt = Annotated[list[Path] | None, typer.Option("--extra-vars", "-e",
                                                     help="YAML/JSON vars file (@file)")]
PrintOpt = Annotated[bool, typer.Option("--print-command",
                                        help="print the ansible-playbook command and stop")]
VerboseOpt = Annotated[int, typer.Option("--verbose", "-v", count=True)]


def _play_keywords(site: Site) -> Path:
    """Play keywords (`serial`) are templated before any host's group_vars are visible, so
    serving.yml would never see vllm_serial from group_vars/vllm: pass the serving hosts'
    value as an extra var (the one `plan` shows)."""
    import tempfile

    from deploy_kit.plan.plan import vllm_serial

    path = Path(tempfile.mkdtemp(prefix="deploykit-")) / "play-keywords.json"
    path.write_text(json.dumps({"vllm_serial": vllm_serial(site)}))
    return path


def _run_playbook(verb: str, playbook: str, inventory: str, vault_password_file: Path | None,
                  limit: str | None, tags: list[str] | None, skip_tags: list[str] | None,
                  check: bool, diff: bool, extra_vars: list[Path] | None,
                  print_command: bool, verbose: int, extra_files: tuple[Path, ...] = ()
                  ) -> None:
    from deploy_kit.ansible.command import RunRequest, printable
    from deploy_kit.ansible.runner import raise_for, run_playbook, show_record
    from deploy_kit.config.open import open_site
    from deploy_kit.project import project_dir

    site = open_site(inventory, vault_password_file)  # exit 3 before any host is contacted
    # ours first: a later -e vllm_serial=N from the command line still wins
    extras = (_play_keywords(site), *(p.resolve() for p in extra_vars or []), *extra_files)
    for path in extras:
        if not path.is_file():
            raise typer.BadParameter(f"no such vars file: {path}", param_hint="--extra-vars")
    request = RunRequest(
        verb=verb, playbook=project_dir() / "playbooks" / playbook, inventory=site.root,
        limit=limit, tags=tuple(tags or ()), skip_tags=tuple(skip_tags or ()), check=check,
        diff=diff, extra_vars_files=extras,
        vault_password_file=vault_password_file.resolve() if vault_password_file else None,
        verbosity=verbose)
    if print_command:
        sys.stdout.write(printable(request) + "\n")
        return
    console.print(f"[bold]{verb}[/] {site.root} ({len(site.hosts)} hosts)"
                  + (" [yellow]check mode[/]" if check else ""))
    record, record_dir, rc = run_playbook(request, console)
    show_record(record, console)
    console.print(f"changed: {record.total_changed}; run record: {record_dir}/summary.json")
    raise_for(record, rc, record_dir)


@app.command()
def up(inventory: InventoryOpt, vault_password_file: VaultOpt = None, limit: LimitOpt = None,
       tags: TagsOpt = None, skip_tags: SkipOpt = None, check: CheckOpt = False,
       diff: DiffOpt = False, extra_vars: ExtraOpt = None, print_command: PrintOpt = False,
       verbose: VerboseOpt = 0) -> None:
    """Converge: pools, gateways, S3 user/bucket, Consul, CoreDNS, resolvers, LMCache, vLLM."""
    _run_playbook("up", "site.yml", inventory, vault_password_file, limit, tags, skip_tags,
                  check, diff, extra_vars, print_command, verbose)


@app.command()
def down(inventory: InventoryOpt, vault_password_file: VaultOpt = None, limit: LimitOpt = None,
         check: CheckOpt = False, extra_vars: ExtraOpt = None, print_command: PrintOpt = False,
         verbose: VerboseOpt = 0,
         destroy_data: Annotated[bool, typer.Option(
             "--yes-i-really-mean-it", help="also delete the bucket, S3 user and pools")] = False
         ) -> None:
    """Remove what `up` created; data (pools, bucket) only with --yes-i-really-mean-it."""
    import tempfile

    flags = Path(tempfile.mkdtemp(prefix="deploykit-")) / "down.json"
    flags.write_text(json.dumps({"deploykit_destroy_data": destroy_data}))
    _run_playbook("down", "down.yml", inventory, vault_password_file, limit, None, None,
                  check, False, extra_vars, print_command, verbose, (flags,))


def _verify(site_name: str, vault_password_file: Path | None, only: set[str] | None,
            as_json: bool, junit: Path | None, verbose: bool, limit: str | None,
            roundtrip: bool = False) -> None:
    import deploy_kit.verify.checks  # noqa: F401  (registers the checks)
    from deploy_kit.config.open import open_site
    from deploy_kit.verify import report
    from deploy_kit.verify.gather import gather
    from deploy_kit.verify.model import evaluate

    site = open_site(site_name, vault_password_file)
    if limit:
        site = site.limit({n for n in site.hosts if n in limit.split(",")} |
                          {h.name for h in site.hosts.values()
                           if not h.groups & {"vllm"}})
    with console.status("probing DNS, concentrators, S3, Ceph and serving hosts…"):
        observation = gather(site)
    findings = evaluate(observation, only)
    if roundtrip:
        from deploy_kit.roundtrip import roundtrip as run_roundtrip

        with console.status("LMCache round trip between two serving hosts…"):
            findings += run_roundtrip(site)
    for error in observation.probe_errors:
        console.print(f"[yellow]probe:[/] {escape(error)}")
    if as_json:
        sys.stdout.write(report.to_json(findings))
    else:
        report.show(findings, console, verbose)
    if junit:
        report.write_junit(findings, junit)
    if report.failed(findings):
        raise VerifyFailed(f"{len(report.failed(findings))} check(s) failed")


@app.command()
def verify(inventory: InventoryOpt, vault_password_file: VaultOpt = None,
           check: Annotated[list[str] | None, typer.Option(
               "--check", help="only these check ids")] = None,
           as_json: Annotated[bool, typer.Option("--json", help="findings as JSON")] = False,
           junit: Annotated[Path | None, typer.Option("--junit", help="JUnit XML file")] = None,
           verbose: Annotated[bool, typer.Option("--verbose", "-v", help="show passes")] = False,
           limit: LimitOpt = None,
           roundtrip: Annotated[bool, typer.Option(
               "--roundtrip", help="store a KV chunk with LMCache on one serving host and "
                                   "read it on another")] = False) -> None:
    """Check the deployed tier for every known silent failure; exit 6 when a check fails."""
    _verify(inventory, vault_password_file, set(check) if check else None, as_json, junit,
            verbose, limit, roundtrip)


@app.command()
def doctor(symptom: Annotated[str, typer.Argument(help="an error text or symptom")],
           inventory: InventoryOpt, vault_password_file: VaultOpt = None) -> None:
    """Map a symptom (\"401 Unauthorized\", \"low hit rate\"…) to the checks that explain
    it, and run those."""
    from deploy_kit.verify.doctor import diagnose

    matches = diagnose(symptom)
    if not matches:
        console.print("no known failure matches; running every check")
        _verify(inventory, vault_password_file, None, False, None, False, None)
        return
    ids: set[str] = set()
    for why, checks in matches:
        console.print(f"[bold]likely:[/] {why} → {', '.join(checks)}")
        ids.update(checks)
    _verify(inventory, vault_password_file, ids, False, None, True, None)


cache_app = typer.Typer(no_args_is_help=True, help="The LMCache objects in the bucket.")
app.add_typer(cache_app, name="cache")
ModelOpt = Annotated[str | None, typer.Option("--model", help="model string as served")]


@cache_app.command("stats")
def cache_stats(inventory: InventoryOpt, model: ModelOpt = None,
                as_json: Annotated[bool, typer.Option("--json")] = False,
                vault_password_file: VaultOpt = None) -> None:
    """Count, bytes and age of cache objects per model / TP×PP / dtype."""
    from deploy_kit.cache.keys import aggregate, model_prefix
    from deploy_kit.cache.store import list_objects, open_bucket
    from deploy_kit.config.open import open_site
    from deploy_kit.console import human_bytes

    bucket = open_bucket(open_site(inventory, vault_password_file))
    groups, foreign = aggregate(list_objects(bucket, model_prefix(model) if model else ""))
    rows = [{"model": g.model, "world_size": g.world_size, "dtype": g.dtype,
             "objects": g.objects, "chunks": len(g.chunks), "bytes": g.bytes,
             "oldest": g.oldest.isoformat() if g.oldest else None,
             "newest": g.newest.isoformat() if g.newest else None} for g in groups]
    if as_json:
        sys.stdout.write(json.dumps({"groups": rows, "other_objects": len(foreign)}, indent=2)
                         + "\n")
        return
    from rich.table import Table

    table = Table(title=f"s3://{bucket.host}", title_justify="left")
    for col in ("model", "TP×PP", "dtype", "objects", "chunks", "bytes", "oldest", "newest"):
        table.add_column(col)
    for r in rows:
        table.add_row(str(r["model"]), str(r["world_size"]), str(r["dtype"]), str(r["objects"]),
                      str(r["chunks"]), human_bytes(int(str(r["bytes"]))),
                      str(r["oldest"])[:19], str(r["newest"])[:19])
    console.print(table)
    if foreign:
        console.print(f"{len(foreign)} object(s) not named like LMCache chunks")


@cache_app.command("purge")
def cache_purge(inventory: InventoryOpt,
                model: Annotated[str, typer.Option("--model", help="model string as served")],
                yes: Annotated[bool, typer.Option("--yes", help="do not ask")] = False,
                vault_password_file: VaultOpt = None) -> None:
    """Delete every cache object of one model (e.g. between TTFT runs)."""
    from deploy_kit.cache.keys import model_prefix
    from deploy_kit.cache.store import delete_objects, list_objects, open_bucket
    from deploy_kit.config.open import open_site

    bucket = open_bucket(open_site(inventory, vault_password_file))
    objects = list_objects(bucket, model_prefix(model))
    if not objects:
        console.print(f"no cache objects for {model}")
        return
    total = sum(o.size for o in objects)
    if not yes:
        if not sys.stdin.isatty():
            raise typer.BadParameter("refusing to delete without a terminal; pass --yes",
                                     param_hint="--yes")
        typer.confirm(f"delete {len(objects)} objects ({total:,} B) of {model}?", abort=True)
    deleted = delete_objects(bucket, [o.key for o in objects])
    console.print(f"deleted {deleted} of {len(objects)} objects of {model}")
    if deleted != len(objects):
        raise DeployKitError(f"{len(objects) - deleted} objects could not be deleted")


bench_app = typer.Typer(no_args_is_help=True, help="Measure the cache tier.")
app.add_typer(bench_app, name="bench")


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


lab_app = typer.Typer(no_args_is_help=True, help="The local lab: real Ceph and "
                      "systemd-nspawn hosts on this machine (needs root).")
app.add_typer(lab_app, name="lab")


@lab_app.command("up")
def lab_up(hosts: Annotated[int, typer.Option("--hosts", min=3, max=8)] = 4) -> None:
    """Bring the lab up (idempotent) and write inventory/lab/."""
    from deploy_kit.lab import lab

    steps = lab.up(hosts, report=lambda m: console.print(m, markup=False))
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
