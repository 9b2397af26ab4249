"""The converge engine: render the site once, then run a playbook through ansible-runner.
Every run that changes hosts comes here: `up` (and each upgrade wave), `down`, `remove` and
the rotations."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from deploy_kit.config.site import Site
from deploy_kit.console import console, stdout
from deploy_kit.core.errors import BadInput
from deploy_kit.flows.request import AnsibleOptions, ConnectionOptions, VaultOptions, reaching

if TYPE_CHECKING:
    from deploy_kit.ansible.command import RunRequest
    from deploy_kit.ansible.events import RunRecord
    from deploy_kit.config.vault import VaultSecrets
    from deploy_kit.ops.site_lock import SiteLock
    from deploy_kit.ops.tls import Issued
    from deploy_kit.render.tls import Sources


def playbook_vars(site: Site) -> dict[str, object]:
    """What the playbooks need before any host var exists: the rolling batch size
    (`serial:` is templated per play, where group_vars are not yet seen)."""
    from deploy_kit.plan.plan import vllm_serial

    return {"vllm_serial": vllm_serial(site)}


def run_playbook(verb: str, playbook: str, inventory: str | list[str], vault: VaultOptions,
                 options: AnsibleOptions, run_vars: dict[str, object] | None = None,
                 connection: ConnectionOptions | None = None,
                 listing: tuple[str, ...] = (), lock_wait: float = 0.0,
                 before: Callable[[Site], None] | None = None,
                 secret_vars: Mapping[str, str] | None = None) -> None:
    """`before`: the verb's own checks of the opened site (and its confirmation), after
    the inventory is valid and before anything is locked, written or contacted.
    `secret_vars`: values the run needs beside the generated ones (a rotation's retired
    values), handed over in the same 0600 file, never in argv."""
    connection = connection or ConnectionOptions()
    if listing:  # Ansible lists without logging in: nothing to ask
        connection = replace(connection, ask_become_pass=False)
    with reaching(connection, ask=not options.print_command) as reach:
        _run_playbook(verb, playbook, inventory, vault, options, run_vars or {}, reach,
                      listing, lock_wait, before, secret_vars)


def _run_playbook(verb: str, playbook: str, inventory: str | list[str], vault: VaultOptions,
                  options: AnsibleOptions, run_vars: dict[str, object],
                  connection: ConnectionOptions, listing: tuple[str, ...],
                  lock_wait: float = 0.0,
                  before: Callable[[Site], None] | None = None,
                  secret_vars: Mapping[str, str] | None = None) -> None:
    from deploy_kit.ansible.command import RunRequest, printable
    from deploy_kit.config.vault import command_flags
    from deploy_kit.ops.site import open_site
    from deploy_kit.project import project_dir

    run_vars = run_vars or {}
    secrets = vault.secrets()  # a prompt asks here, once: ansible-playbook gets the files
    site = open_site(inventory, secrets)  # exit 3 before any host is contacted
    refuse_bad_input(site, options)
    if before is not None:
        before(site)
    request = RunRequest(
        verb=verb, playbook=project_dir() / "playbooks" / playbook,
        inventory=site.inventory_source.resolve(),
        more_inventories=tuple(p.resolve() for p in site.inventory_sources[1:]),
        connection=tuple(connection.argv()), listing=listing,
        limit=options.limit, tags=options.tags,
        skip_tags=options.skip_tags, check=options.check, diff=options.diff,
        extra_vars_files=options.extra_vars,
        extra_vars_inline=(json.dumps({**playbook_vars(site), **run_vars}),
                           *options.inline_vars),
        vault_args=tuple(command_flags(secrets.identities)),  # the user's flags, as given
        verbosity=options.verbose, become=options.become, forks=options.forks)
    if options.print_command:
        # writes nothing: a plain ansible-playbook run renders the site itself (render.yml)
        # and issues no certificate; from any directory, under the user's own ansible.cfg
        from deploy_kit.ansible.environment import playbook_variables

        request = with_store_flag(site, request)
        stdout().write(printable(request, playbook_variables(project_dir())) + "\n")
        return
    if listing:  # ansible-playbook's own listing; nothing rendered, issued or recorded
        from deploy_kit.ansible.runner import list_only

        with secrets.materialized() as handover:  # Ansible reads the vaulted inventory
            list_only(replace(request, vault_args=tuple(handover.argv)), handover.env)
        return
    if options.check:  # changes nothing anywhere: no lock, runs beside a converge
        generated = fill_secrets(site, verb, check=True) | dict(secret_vars or {})
        if verb != "up":
            _run_rendered(verb, site, request, options, secrets, None, generated=generated)
            return
        with tempfile.TemporaryDirectory(prefix="deploykit-check-") as scratch:
            # the would-be CA and certificates live here for the run, then go
            _run_rendered(verb, site, request, options, secrets,
                          issue_tls(site, Path(scratch) / "tls"), generated=generated)
        return
    from deploy_kit.ops.site_lock import site_lock

    # one converge of a site at a time (exit 7 naming the holder), before the CA, the
    # generated secrets or anything else is written
    with site_lock(site, verb, lock_wait) as lock:
        # refuses a store it cannot use
        fresh: dict[str, str] = {}
        generated = fill_secrets(site, verb, check=False, fresh=fresh) | dict(secret_vars or {})
        if verb == "up":
            write_identity(site)
        _run_rendered(verb, site, request, options, secrets,
                      issue_tls(site) if verb == "up" else None, lock, generated, fresh)


def refuse_bad_input(site: Site, options: AnsibleOptions) -> None:
    """Exit 2 or 3 before any host is contacted: an unusable CA, a missing vars file,
    deploykit settings in -e, an unknown tag, a --limit that names nothing."""
    from deploy_kit.ansible.extra_vars import check_extra_vars, check_inline_vars
    from deploy_kit.ansible.tags import unknown_tags
    from deploy_kit.ops.tls import refuse_bad_ca
    from deploy_kit.project import project_dir

    refuse_bad_ca(site)  # a CA `up` could not use: exit 3 too, before anything is written
    for path in options.extra_vars:
        if not path.is_file():
            raise BadInput(f"no such vars file: {path}", param_hint="--extra-vars")
    check_extra_vars(options.extra_vars, site.vault)
    check_inline_vars(options.inline_vars)
    unknown = unknown_tags(options.tags + options.skip_tags, project_dir())
    if unknown:
        raise BadInput(
            f"no task is tagged {', '.join(unknown)}; tags: "
            f"{', '.join(sorted(known_tags_of(project_dir())))}", param_hint="--tags")
    if options.limit:
        check_limit(site, options.limit)


def fill_secrets(site: Site, verb: str, check: bool,
                 fresh: dict[str, str] | None = None) -> dict[str, str]:
    """The generated secrets this run hands to Ansible: only the site's gaps (what the
    inventory and vault leave unset). `up` generates missing ones into the store (and into
    `fresh`, to take back if the running site refuses them); --check and every other verb
    write nothing (check mode uses throwaway values and says so)."""
    from deploy_kit.ops import secrets_store

    if verb == "up" and not check:
        fill = secrets_store.ensure(site)
        if fresh is not None:
            fresh.update({n: fill.values[n] for n in fill.generated})
        for name in fill.generated:
            console().print(f"secrets: generated {name} in {secrets_store.store_path(site)}")
        return fill.values
    fill = secrets_store.plan_fill(site)
    for name in fill.generated:
        console().print(f"secrets (check mode): would generate {name} in "
                        f"{secrets_store.store_path(site)}" if check else
                        f"secrets: {name} does not exist yet (`deploykit up` generates it)")
    # only `up` (or its check) needs values it has not stored yet
    return fill.values if verb == "up" else \
        {k: v for k, v in fill.values.items() if k not in fill.generated}


def write_identity(site: Site) -> None:
    """The first `up` commits the site's name to the inventory (config/identity.py)."""
    from deploy_kit.ops.site_identity import ensure_identity

    written = ensure_identity(site)
    if written is not None:
        console().print(f"site: wrote its identity {written} ({site.name}): commit it with "
                        "the inventory")


def with_store_flag(site: Site, request: RunRequest) -> RunRequest:
    """--print-command: a plain ansible-playbook gets the generated secrets from the store
    file itself (its path, never a value; Ansible decrypts the vault file with the same
    vault flags); a store every other verb refuses is refused here too (read_store checks
    it); without a store it says what is missing."""
    from deploy_kit.config.site_secrets import gaps
    from deploy_kit.ops import secrets_store

    if secrets_store.read_store(site):
        path = secrets_store.store_path(site)
        return replace(request, extra_vars_files=(*request.extra_vars_files, path))
    missing = gaps(site)
    if missing:
        console().print(f"secrets: {', '.join(missing)} not generated yet: run `deploykit "
                        f"secrets generate -i {site.inventory_source}` first (with the vault "
                        "flags), or set them in the vault")
    return request


def _run_rendered(verb: str, site: Site, request: RunRequest, options: AnsibleOptions,
                  secrets: VaultSecrets, tls_sources: Sources | None,
                  lock: SiteLock | None = None,
                  generated: dict[str, str] | None = None,
                  fresh: dict[str, str] | None = None) -> None:
    from deploy_kit.ansible.runner import new_record_dir, raise_for, show_record
    from deploy_kit.ansible.runner import run_playbook as run_with_runner
    from deploy_kit.ops.rundir import write_run_tree

    # Render once, here: every role copies from this tree instead of re-reading the inventory.
    record_dir = new_record_dir(verb)
    if lock is not None:  # a refused second run names this run's record
        lock.note(run=str(record_dir))
    rendered = record_dir / "rendered"
    write_run_tree(site, rendered, tls_sources)
    tree = record_dir / "run-vars.json"
    tree.write_text(json.dumps({"deploykit_render_dir": str(rendered)}) + "\n")
    request = replace(request, extra_vars_files=(tree, *request.extra_vars_files))
    console().print(f"[bold]{verb}[/] {site.root} ({len(site.hosts)} hosts)"
                    + (" [yellow]check mode[/]" if options.check else ""))
    from deploy_kit.ops.secrets_store import handover as generated_handover

    # the vault secrets read above and the generated gaps, each as 0600 files removed after
    with secrets.materialized() as handover, \
            generated_handover(generated or {}) as generated_file:
        request = replace(request, vault_args=tuple(handover.argv))
        if generated_file is not None:  # after the render tree, before the user's -e
            request = replace(request, extra_vars_files=(
                request.extra_vars_files[0], generated_file, *request.extra_vars_files[1:]))
        record, record_dir, rc = run_with_runner(request, console(), record_dir,
                                                 env=handover.env)
    show_record(record, console())
    console().print(f"changed: {record.total_changed}; run record: {record_dir}/summary.json")
    if fresh and refused_for_secrets(record):
        take_back(site, fresh)
    raise_for(record, rc, record_dir)


# playbooks/secrets_agree.yml's play: a run it stops has changed nothing on any host
SECRETS_AGREE_PLAY = "Check this run holds the secrets the running site holds"


def refused_for_secrets(record: RunRecord) -> bool:
    """The running site refused this run's secrets before any host changed."""
    return bool(record.failed) and record.total_changed == 0 and all(
        f.play == SECRETS_AGREE_PLAY for f in record.failed)


def take_back(site: Site, fresh: dict[str, str]) -> None:
    """A second controller without the site's secrets generated its own: the site refused
    them, so they leave the store again (the next run must not find them as the site's)."""
    from deploy_kit.ops.secrets_store import forget, store_path

    gone = forget(site, fresh)
    if gone:
        console().print(f"secrets: took back {', '.join(gone)} from {store_path(site)} "
                        "(generated by this run; the running site holds others)")


def listing_flags(list_hosts: bool, list_tasks: bool) -> tuple[str, ...]:
    return tuple(flag for flag, on in (("--list-hosts", list_hosts),
                                       ("--list-tasks", list_tasks)) if on)


def known_tags_of(project: Path) -> frozenset[str]:
    from deploy_kit.ansible.tags import known_tags

    return known_tags(project)


def check_limit(site: Site, pattern: str) -> None:
    """A --limit term that names no host or group is a usage error, not an empty run.
    Patterns Ansible reads beyond names and globs (`&`, `!`, `~regex`, `[0:2]`) pass."""
    from deploy_kit.config.selection import SelectionError, limited_hosts

    plain = ",".join(t for t in pattern.replace(":", ",").split(",")
                     if t and not (t[0] in "&!~@" or "[" in t))
    try:
        if plain:
            limited_hosts(site, plain)
    except SelectionError as exc:
        raise BadInput(str(exc), param_hint="--limit") from None


def tls_material(site: Site, scratch: Path | None = None
                 ) -> tuple[list[Issued], Sources | None]:
    """The site's CA and certificates (S3, then Consul) as a run needs them: issued or kept
    beside the inventory, or in check mode (`scratch`) made there instead, with the sources
    the rendered tree copies from. The collection's render action uses the same."""
    from deploy_kit.ops.consul_tls import check_consul_tls, ensure_consul_tls
    from deploy_kit.ops.tls import check_site_tls, ensure_site_tls

    if scratch is None:
        return [*ensure_site_tls(site), *ensure_consul_tls(site)], None
    would, sources = check_site_tls(site, scratch)
    consul_would, sources = check_consul_tls(site, scratch, sources)
    return would + consul_would, sources


def issue_tls(site: Site, scratch: Path | None = None) -> Sources | None:
    """With deploykit_s3_tls: the CA and each concentrator certificate exist on the
    controller before any role copies them (kept when still valid, so reruns change
    nothing). Check mode (`scratch`): nothing is written beside the inventory; what would
    be created or issued is made in `scratch` instead and reported, and the returned
    sources tell the rendered tree to copy from there."""
    from deploy_kit.render import tls

    found, sources = tls_material(site, scratch)
    if scratch is None:
        for issued in found:
            if issued.action == "issued":
                console().print(f"TLS: issued the certificate of {issued.host} (valid until "
                                f"{issued.not_after:%Y-%m-%d}) in {issued.path.parent}")
        return None
    tls_dir = tls.tls_dir(site.root, site.settings)
    for issued in found:
        if issued.action == "would create":
            console().print(f"TLS (check mode): would create the {issued.host.strip('()')} "
                            f"{issued.path}")
        elif issued.action == "would issue":
            console().print(f"TLS (check mode): would issue the certificate of "
                            f"{issued.host} in {tls_dir}")
    return sources


def refuse_run_vars(options: AnsibleOptions) -> None:
    """`-e` that names a deploykit setting or run variable is refused (exit 2); a vaulted
    file waits for the run's vault secrets (refuse_bad_input)."""
    from deploy_kit.ansible.extra_vars import check_extra_vars, check_inline_vars

    check_extra_vars(tuple(p for p in options.extra_vars if p.is_file()))
    check_inline_vars(options.inline_vars)
