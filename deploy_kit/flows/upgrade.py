"""`up` with an upgrade pending: the waves of plan/upgrade.py, each one ordinary `up` run
limited to its hosts (render, converge, rolling restarts, health gates, converge records),
then verify's checks limited to the same hosts, before the next wave. One site lock for the
whole flow; a failed run (exit 4) or a failed verify (exit 6) stops it and says how to go
on. A stopped flow resumes by running the same command again: the records of the hosts it
upgraded say so, and they are skipped (plan/upgrade.plan_waves).

Why several limited runs and not one run with `serial: [1, "10%"]`: the serving play
configures (installs the new wheels on) every host it is given at once and only the
restart rolls, so in one run every host would carry the new version before the canary was
checked; and a host's converge record is written at the end of a run, so only a run per
wave leaves the records a resume reads."""

from __future__ import annotations

import functools
import shlex
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.markup import escape

from deploy_kit.console import console
from deploy_kit.core.errors import BadInput, DeployKitError, HostsUnreachable, VerifyFailed
from deploy_kit.flows import converge
from deploy_kit.flows.request import (
    AnsibleOptions,
    ConnectionOptions,
    VaultOptions,
    on_site,
    reaching,
)

if TYPE_CHECKING:
    from deploy_kit.config.site import Site
    from deploy_kit.config.vault import VaultSecrets
    from deploy_kit.plan.upgrade import Upgrade, Wave


@dataclass(frozen=True)
class FlowOptions:
    canary: str | None = None
    no_canary: bool = False
    batch: str | None = None
    pause_after_canary: bool = False

    def staged(self) -> bool:
        """Options that ask for waves even with no version change (with --restart-serving:
        a staged rolling restart)."""
        return self.canary is not None or self.batch is not None or self.pause_after_canary

    def argv(self) -> list[str]:
        """The flags to repeat on a resume (the canary is done by then)."""
        return [*(["--batch", self.batch] if self.batch else []),
                *(["--no-canary"] if self.no_canary else [])]


@dataclass(frozen=True)
class OnceVault(VaultOptions):
    """The vault read (a prompt asked) once for every run of the flow."""

    @functools.cached_property
    def _secrets(self) -> VaultSecrets:
        return super().secrets()

    def secrets(self) -> VaultSecrets:
        return self._secrets


def check_batch(batch: str | None) -> None:
    from deploy_kit.plan.upgrade import BatchError, batch_size

    if batch is not None:
        try:
            batch_size(batch, 1)
        except BatchError as exc:
            raise BadInput(str(exc), param_hint="--batch") from None


def survey(site: Site, limit: str | None, connection: ConnectionOptions) -> Upgrade:
    """Read every (limited) host's recorded versions and compare them with the inventory."""
    from deploy_kit.config.selection import SelectionError, limited_hosts
    from deploy_kit.plan.upgrade import detect
    from deploy_kit.transport.records import read_versions

    try:
        hosts = limited_hosts(site, limit) if limit else None
    except SelectionError as exc:
        raise BadInput(str(exc), param_hint="--limit") from None
    with console().status("reading each host's converge record (versions)…"):
        recorded = read_versions(on_site(site, connection), hosts)
    found = detect(site, recorded, hosts)
    for host, why in sorted(found.unknown.items()):
        if "could not be read" in why:  # Ansible will say the same of it in the run
            console().print(f"[yellow]warning:[/] {escape(host)}: {escape(why)}; it is in "
                            "no wave, only in the last, ordinary run")
    return found


def pending_upgrade(site: Site) -> dict[str, Any]:
    """plan --upgrade: what `up` would print and roll, as data."""
    from deploy_kit.plan.upgrade import plan_waves

    found = survey(site, None, ConnectionOptions())
    waves = plan_waves(site, found) if found.pending else []
    return {
        "lines": found.lines(),
        "cold_cache": found.cold_cache,
        "changes": [{"component": c.component, "from": c.old, "to": c.new,
                     "hosts": list(c.hosts)} for c in found.changes],
        "key_space": [{"setting": k.setting, "from": k.old, "to": k.new,
                       "hosts": list(k.hosts), "why": k.why} for k in found.key_changes],
        "unknown": found.unknown,
        "waves": ["rollout: " + w.title(i, len(waves)) for i, w in enumerate(waves, 1)],
    }


def show_upgrade(upgrade: Upgrade) -> None:
    for line in upgrade.lines():
        style = "yellow" if line.startswith("cold cache") else "bold"
        console().print(f"[{style}]{escape(line)}[/]")


def staged_restart(site: Site, limit_hosts: set[str] | None) -> Upgrade:
    """--restart-serving with --canary/--batch and no version change: every serving host
    (of the limit) moves, so the restart rolls in waves with verify between them."""
    from deploy_kit.plan.upgrade import Upgrade

    serving = [h.name for h in site.group("vllm")
               if limit_hosts is None or h.name in limit_hosts]
    return Upgrade(moving={h: frozenset({"vllm"}) for h in serving})


@contextmanager
def _stopping(inventory: str, flow: FlowOptions, wave: str,
              staged_rest: list[str] | None) -> Iterator[None]:
    """A failure in a wave names the wave and how to go on, keeping its exit code. An
    upgrade resumes by the same command (the records); a staged restart keeps no state, so
    its way on names the hosts it did not reach (`staged_rest`)."""
    from deploy_kit.plan.upgrade import resume_hint

    try:
        yield
    except BadInput:  # a usage error stays the command line's own
        raise
    except DeployKitError as exc:
        exc.message = f"{wave}: {exc.message}"
        how = resume_hint(inventory, shlex.join(flow.argv())) if staged_rest is None else (
            f"the hosts this restart did not reach restart with `deploykit up -i {inventory} "
            f"--restart-serving --limit {','.join(staged_rest)}`" if staged_rest else
            "this was the last wave")
        exc.hint = (f"{exc.hint}; " if exc.hint else "") + how
        raise


def converge_up(inventory: str | list[str], vault: VaultOptions, options: AnsibleOptions,
                run_vars: dict[str, Any], connection: ConnectionOptions,
                listing: tuple[str, ...], lock_wait: float, flow: FlowOptions) -> None:
    """`up`: the flow below, or, for --list-hosts/--list-tasks and --print-command (they
    contact no host: no record to read), the one run they show."""
    if not (listing or options.print_command):
        run_flow(inventory, vault, options, run_vars, connection, lock_wait, flow)
        return
    converge.run_playbook("up", "site.yml", inventory, vault, options, run_vars,
                          connection=connection, listing=listing, lock_wait=lock_wait)


def run_flow(inventory: str | list[str], vault: VaultOptions, options: AnsibleOptions,
             run_vars: dict[str, Any], connection: ConnectionOptions, lock_wait: float,
             flow: FlowOptions) -> None:
    """`up`: read the records; no upgrade pending, one ordinary run; else the waves."""
    from deploy_kit.config.selection import limited_hosts
    from deploy_kit.ops.site import open_site
    from deploy_kit.ops.site_lock import site_lock
    from deploy_kit.plan.upgrade import FlowError, plan_waves

    check_batch(flow.batch)
    vault = OnceVault(vault.vault_ids, vault.password_files, vault.ask)
    with reaching(connection) as reach:
        site = open_site(inventory, vault.secrets())  # exit 3 before any host is contacted
        converge.refuse_bad_input(site, options)  # and exit 2 for the rest of bad input
        name = inventory if isinstance(inventory, str) else ",".join(inventory)
        if options.tags or options.skip_tags:  # a partial run records nothing: no flow
            if flow.staged():
                raise BadInput("--canary, --batch and --pause-after-canary roll "
                               "whole converges: drop --tags/--skip-tags",
                               param_hint="--tags")
            converge._run_playbook("up", "site.yml", inventory, vault, options, run_vars,
                                   reach, (), lock_wait)
            return
        # --check changes nothing and takes no lock: it shows the waves it would roll
        with (nullcontext() if options.check else site_lock(site, "up", lock_wait)):
            upgrade = survey(site, options.limit, reach)
            restart = bool(run_vars.get("deploykit_restart_serving"))
            staged = not upgrade.pending and flow.staged() and restart
            if staged:
                upgrade = staged_restart(site, limited_hosts(site, options.limit)
                                         if options.limit else None)
            elif not upgrade.pending and flow.staged():
                console().print("no upgrade pending (every host's record has the "
                                "inventory's versions): --canary/--batch have nothing to "
                                "stage; converging as usual")
            show_upgrade(upgrade)
            if not upgrade.pending:
                converge._run_playbook("up", "site.yml", inventory, vault, options, run_vars,
                                       reach, ())
                return
            try:
                waves = plan_waves(site, upgrade, flow.canary, flow.no_canary, flow.batch)
            except FlowError as exc:
                raise BadInput(str(exc), param_hint="--canary") from None
            console().print(f"[bold]rollout[/]: {len(waves)} wave(s), each verified before "
                            "the next:")
            for i, wave in enumerate(waves, 1):
                console().print(f"  {escape(wave.title(i, len(waves)))}")
            if options.check:
                console().print("check mode: one run over every host shows what the waves "
                                "would change")
                converge._run_playbook("up", "site.yml", inventory, vault, options, run_vars,
                                       reach, ())
                return
            for i, wave in enumerate(waves, 1):
                title = wave.title(i, len(waves))
                console().print(f"[bold]{escape(title)}[/]")
                rest_hosts = [h for w in waves[i:] for h in w.hosts] if staged else None
                with _stopping(name, flow, title, rest_hosts):
                    wave_vars = dict(run_vars)
                    if wave.restart_serving:
                        wave_vars["deploykit_restart_serving"] = True
                    converge._run_playbook("up", "site.yml", inventory, vault,
                                           replace(options, limit=",".join(wave.hosts)),
                                           wave_vars, reach, ())
                    verify_wave(site, wave, reach, title)
                if wave.canary and flow.pause_after_canary and \
                        not any(w.canary for w in waves[i:]):
                    again = f"`deploykit up -i {name}" + (
                        f" {shlex.join(flow.argv())}`" if flow.argv() else "`") + \
                        " (the canary's record says it is upgraded: no canary again)"
                    if staged:
                        again = (f"`deploykit up -i {name} --restart-serving --limit "
                                 f"{','.join(h for w in waves[i:] for h in w.hosts)}`")
                    console().print(f"[bold]paused after the canary[/]: check it, then go "
                                    f"on with {again}")
                    return
            rest = final_run(site, options, run_vars, waves)
            if rest is not None:
                console().print("[bold]the rest[/]: every host not in a wave (the Ceph "
                                "admin host, monitoring, hosts with nothing to upgrade)")
                converge._run_playbook("up", "site.yml", inventory, vault, rest[0], rest[1],
                                       reach, ())
            console().print(f"[green]{'rollout' if staged else 'upgrade'} done[/]: "
                            f"{len(upgrade.moving)} host(s) in {len(waves)} wave(s), each "
                            "verified")


def final_run(site: Site, options: AnsibleOptions, run_vars: dict[str, Any],
              waves: list[Wave]) -> tuple[AnsibleOptions, dict[str, Any]] | None:
    """The run after the waves: the hosts of the (user's) limit that no wave converged,
    or None when none is left. The wave hosts are left out by name: their records already
    skip them, except under --full or --restart-serving, which would converge or restart
    them a second time. --restart-serving stays only while a serving host of the limit
    was in no wave (the waves restarted the others)."""
    from deploy_kit.config.selection import limited_hosts

    rolled = {h for w in waves for h in w.hosts}
    chosen = limited_hosts(site, options.limit) if options.limit else set(site.hosts)
    if not chosen - rolled:
        return None
    terms = [options.limit or "*", *(f"!{h}" for h in sorted(rolled))]
    rest_vars = dict(run_vars)
    if not any("vllm" in site.hosts[h].groups for h in chosen - rolled):
        rest_vars.pop("deploykit_restart_serving", None)
    return replace(options, limit=",".join(terms)), rest_vars


def verify_wave(site: Site, wave: Wave, connection: ConnectionOptions, title: str,
                storage_result: Path = Path("runs/bench-storage/storage.json")) -> None:
    """verify's checks limited to the wave's hosts (checks that need others skip)."""
    from deploy_kit.ops.secrets_store import with_stored
    from deploy_kit.verify import report
    from deploy_kit.verify.model import Status
    from deploy_kit.verify.run import verify_pass

    limit = ",".join(wave.hosts)
    with console().status(f"verify --limit {limit}…"):
        done = verify_pass(on_site(with_stored(site), connection), None, limit,
                           storage_result)
    if done.observation.unreachable:
        raise HostsUnreachable("verify: unreachable: " + "; ".join(
            f"{h}: {why}" for h, why in sorted(done.observation.unreachable.items())))
    failed = report.failed(done.findings)
    counts = {s: sum(1 for f in done.findings if f.status == s) for s in Status}
    console().print(f"verify --limit {escape(limit)}: "
                    + ", ".join(f"{n} {s.value}" for s, n in counts.items() if n))
    for f in failed:
        console().print(f"  [red]FAIL[/] {escape(f.check)} {escape(f.target)}: "
                        f"{escape(f.message)}")
    if failed:
        raise VerifyFailed(f"{len(failed)} check(s) failed after the upgrade of "
                           f"{', '.join(wave.hosts)}; the flow stopped before the next wave",
                           hint=f"see `deploykit verify -i {site.inventory_source} "
                                f"--limit {limit}`")
