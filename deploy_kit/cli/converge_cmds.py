"""up and down: render the site once, then run the playbooks through ansible-runner."""

from __future__ import annotations

import json
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Annotated

import typer

from deploy_kit.cli.options import (
    AnsibleOptions,
    CheckOpt,
    DiffOpt,
    ExtraOpt,
    InventoryOpt,
    LimitOpt,
    PrintOpt,
    SkipOpt,
    TagsOpt,
    VaultOpt,
    VerboseOpt,
)
from deploy_kit.config.site import Site
from deploy_kit.console import console, stdout


def playbook_vars(site: Site, rendered: Path) -> dict[str, object]:
    """What the playbooks need before any host var exists: where the tree is, and the
    rolling batch size (`serial:` is templated per play, where group_vars are not yet seen)."""
    from deploy_kit.plan.plan import vllm_serial

    return {"deploykit_render_dir": str(rendered), "vllm_serial": vllm_serial(site)}


def run_playbook(verb: str, playbook: str, inventory: str, vault_password_file: Path | None,
                 options: AnsibleOptions, run_files: tuple[Path, ...] = ()) -> None:
    from deploy_kit.ansible.command import RunRequest, printable
    from deploy_kit.ansible.extra_vars import check_extra_vars
    from deploy_kit.ansible.runner import new_record_dir, raise_for, show_record
    from deploy_kit.ansible.runner import run_playbook as run_with_runner
    from deploy_kit.config.open import open_site
    from deploy_kit.project import project_dir
    from deploy_kit.render.rundir import write_run_tree

    site = open_site(inventory, vault_password_file)  # exit 3 before any host is contacted
    for path in options.extra_vars:
        if not path.is_file():
            raise typer.BadParameter(f"no such vars file: {path}", param_hint="--extra-vars")
    check_extra_vars(options.extra_vars)
    request = RunRequest(
        verb=verb, playbook=project_dir() / "playbooks" / playbook, inventory=site.root,
        limit=options.limit, tags=options.tags, skip_tags=options.skip_tags,
        check=options.check, diff=options.diff,
        extra_vars_files=options.extra_vars + run_files,
        vault_password_file=vault_password_file.resolve() if vault_password_file else None,
        verbosity=options.verbose)
    # Render once, here: every role copies from this tree instead of re-reading the inventory.
    # Also for --print-command, so the printed command runs as it is.
    if verb == "up":
        issue_tls(site)
    record_dir = new_record_dir(verb)
    rendered = record_dir / "rendered"
    write_run_tree(site, rendered)
    run_vars = record_dir / "run-vars.json"
    run_vars.write_text(json.dumps(playbook_vars(site, rendered)) + "\n")
    # first in the list: a later -e from the command line still wins
    request = replace(request, extra_vars_files=(run_vars, *request.extra_vars_files))
    if options.print_command:
        stdout().write(printable(request) + "\n")
        return
    console().print(f"[bold]{verb}[/] {site.root} ({len(site.hosts)} hosts)"
                    + (" [yellow]check mode[/]" if options.check else ""))
    record, record_dir, rc = run_with_runner(request, console(), record_dir)
    show_record(record, console())
    console().print(f"changed: {record.total_changed}; run record: {record_dir}/summary.json")
    raise_for(record, rc, record_dir)


def issue_tls(site: Site) -> None:
    """With deploykit_s3_tls: the CA and each concentrator certificate exist on the
    controller before any role copies them (kept when still valid, so reruns change
    nothing). Also in check mode: only the controller's TLS directory is written."""
    from deploy_kit.tls import ensure_site_tls

    for issued in ensure_site_tls(site):
        if issued.action == "issued":
            console().print(f"TLS: issued the certificate of {issued.host} (valid until "
                            f"{issued.not_after:%Y-%m-%d}) in {issued.path.parent}")


def up(inventory: InventoryOpt, vault_password_file: VaultOpt = None, limit: LimitOpt = None,
       tags: TagsOpt = None, skip_tags: SkipOpt = None, check: CheckOpt = False,
       diff: DiffOpt = False, extra_vars: ExtraOpt = None, print_command: PrintOpt = False,
       verbose: VerboseOpt = 0) -> None:
    """Converge: pools, gateways, S3 user/bucket, Consul, CoreDNS, resolvers, LMCache, vLLM."""
    options = AnsibleOptions.of(limit=limit, tags=tags, skip_tags=skip_tags, check=check,
                                diff=diff, extra_vars=extra_vars, print_command=print_command,
                                verbose=verbose)
    run_playbook("up", "site.yml", inventory, vault_password_file, options)


def down(inventory: InventoryOpt, vault_password_file: VaultOpt = None, limit: LimitOpt = None,
         check: CheckOpt = False, extra_vars: ExtraOpt = None, print_command: PrintOpt = False,
         verbose: VerboseOpt = 0,
         destroy_data: Annotated[bool, typer.Option(
             "--yes-i-really-mean-it", help="also delete the bucket, S3 user and pools")] = False
         ) -> None:
    """Remove what `up` created; data (pools, bucket) only with --yes-i-really-mean-it."""
    flags = Path(tempfile.mkdtemp(prefix="deploykit-")) / "down.json"
    flags.write_text(json.dumps({"deploykit_destroy_data": destroy_data}))
    options = AnsibleOptions.of(limit=limit, check=check, extra_vars=extra_vars,
                                print_command=print_command, verbose=verbose)
    run_playbook("down", "down.yml", inventory, vault_password_file, options, (flags,))
