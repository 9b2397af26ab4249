"""Human view of a Plan (rich tables on stderr)."""

from __future__ import annotations

from collections.abc import Iterable

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from deploy_kit.console import human_bytes
from deploy_kit.core.hostlist import compact_hosts, merge_per_host
from deploy_kit.plan.breakeven import MAX_TOKENS
from deploy_kit.plan.plan import Plan
from deploy_kit.plan.roll import hours
from deploy_kit.plan.routing import RoutingEstimate, Shares


def _hosts(names: Iterable[str]) -> str:
    """A host list as Ansible ranges, safe inside rich markup."""
    return escape(compact_hosts(names))


def _show_hosts(plan: Plan, console: Console, per_host: bool) -> None:
    """Per host (or, unless per_host, per set of hosts with identical rows): its instances,
    and per device of one instance what vLLM must fit there; LMCache's DRAM is the
    in-process pinned pool or the server's L1, never both."""
    hosts = Table(title="Serving hosts (per device: weights, KV capacity, max-length "
                        "requests that fit)", title_justify="left")
    for col in ("host", "accelerator", "instances × devices", "block", "weights",
                "KV capacity", "requests", "LMCache DRAM", "/dev/shm (LMCache)"):
        hosts.add_column(col)
    rows: dict[tuple[str, ...], list[str]] = {}
    notes: dict[str, list[str]] = {}
    for h in plan.hosts:
        if h.kv_capacity_tokens is None:
            weights = capacity = requests = "?" if h.fit_note else "-"
        else:
            weights = human_bytes(h.weights_bytes or 0)
            capacity = f"{h.kv_capacity_tokens:,} tokens"
            requests = f"{h.requests_fit} × {h.max_model_len:,}"
        dram = f"L1 {human_bytes(h.lmcache_server_l1_bytes)}" \
            if h.lmcache_server_l1_bytes is not None else \
            f"pinned {human_bytes(h.pinned_dram_bytes)}"
        row: tuple[str, ...] = (f"{h.accelerator} ({h.device})", f"{h.instances} × {h.workers}",
               str(h.block_size), weights, capacity, requests, dram, human_bytes(h.shm_bytes))
        rows.setdefault((h.host, *row) if per_host else row, []).append(h.host)
        if h.fit_note:
            notes.setdefault(h.fit_note, []).append(h.host)
    for key, names in rows.items():
        label = _hosts(names)
        hosts.add_row(f"{label} ({len(names)})" if len(names) > 1 else label,
                      *(key[1:] if per_host else key))
    console.print(hosts)
    for note, names in notes.items():
        console.print(f"  {_hosts(names)}: {escape(note)}")


def _show_tenancy(plan: Plan, console: Console) -> None:
    """Each bucket's sharing group (one key format per bucket) and each team."""
    for g in plan.sharing_groups:
        owner = f"team {g.team}" if g.team else "no team"
        console.print(f"[bold]Bucket[/] [cyan]{g.bucket}[/] ({owner}, {g.topology}): "
                      f"{_hosts(g.hosts)}; keys {escape(g.key_format)}")
    if not plan.teams:
        return
    table = Table(title="Teams", title_justify="left")
    for col in ("team", "bucket", "RGW user", "cache_salt", "quota", "hosts"):
        table.add_column(col)
    for t in plan.teams:
        quota = human_bytes(t.quota_bytes) if t.quota_bytes else "none"
        table.add_row(t.name, t.bucket, t.uid, t.salt, quota, _hosts(t.hosts) or "-")
    console.print(table)


def show_plan(plan: Plan, console: Console, per_host: bool = False) -> None:
    """The plan for people: host lists as Ansible ranges, identical serving hosts and
    per-host warnings folded into one line each (per_host: a table row per host)."""
    s = plan.site
    console.print(f"[bold]Site[/] {s['name']}: {s['hosts']} hosts, S3 name [cyan]{s['s3_fqdn']}"
                  f"[/], remote_url [cyan]{s['remote_url']}[/], DNS {s['dns_mode']}, "
                  f"Ceph {s['ceph_version']} ({s['ceph_rgw_mode']})")
    for m in plan.models:
        console.print(f"[bold]Model[/] {m.model} (TP {m.tensor_parallel} × PP "
                      f"{m.pipeline_parallel}, KV {m.kv_dtype}) on {_hosts(m.hosts)}")
        console.print(f"  {m.bytes_per_token:,} B/token; a {m.chunk_tokens}-token chunk is "
                      f"{m.objects_per_chunk} object(s) of {human_bytes(m.object_bytes)} "
                      f"({m.object_bytes:,} B"
                      + (f", {m.l2_frame_bytes} B of it the AES-GCM frame" if m.l2_frame_bytes
                         else "") + f"), {human_bytes(m.chunk_bytes)} per chunk")
        console.print(f"  S3 requests per chunk through the concentrators: "
                      f"{m.s3_put_requests_per_chunk} to store, {m.s3_get_requests_per_chunk} "
                      f"to read (awscrt splits objects above 8 MiB into multipart parts and "
                      f"ranged GETs)")
        console.print(f"  {m.target_tokens:,} cached tokens need {human_bytes(m.storage_bytes)}"
                      f" ({human_bytes(m.storage_raw_bytes)} raw); objects are named "
                      f"{m.object_name_pattern}")
    _show_hosts(plan, console, per_host)
    pools = Table(title="RGW pools", title_justify="left")
    for col in ("pool", "pg_num", "size", "min_size", "application"):
        pools.add_column(col)
    for p in plan.pools:
        pools.add_row(p.name, str(p.pg_num), str(p.size), str(p.min_size), p.application)
    console.print(pools)
    per_osd = f", {plan.pgs_per_osd:.0f} per OSD" if plan.pgs_per_osd is not None else ""
    console.print(f"PG replicas: {plan.pg_replicas:,}{per_osd}")
    console.print(f"PG autoscaler: {plan.site['pg_autoscaler']}")
    d = plan.dns
    if plan.site.get("consul"):
        console.print(plan.site["consul"])
    _show_tenancy(plan, console)
    console.print(f"[bold]DNS[/] {' and '.join(d['names'])} → {d['expected_a_records']} A records "
                  f"({', '.join(d['addresses'])}) from {', '.join(d['servers'])}")
    for g in plan.serving_groups:
        table = Table(title=f"Remote KV vs recompute: {g.model} on {g.device} (TP "
                            f"{g.tensor_parallel}; {g.effective_tflops:g} TFLOPS per device, "
                            f"{g.tflops_source}; GET {g.storage_gbps:g} Gbit/s per host) "
                            f"on {_hosts(g.hosts)}", title_justify="left")
        for col in ("context", "KV bytes", "cold prefill", "storage", "break-even",
                    "remote hit"):
            table.add_column(col)
        for r in g.rows:
            prefill = "?" if r.predicted_prefill_s is None else f"{r.predicted_prefill_s:.2f} s"
            breakeven = "?" if r.breakeven_storage_gbps is None else \
                f"{r.breakeven_storage_gbps:.1f} Gbit/s"
            wins = "?" if r.remote_wins is None else ("faster" if r.remote_wins else "slower")
            table.add_row(f"{r.context_tokens // 1024}K", human_bytes(r.kv_bytes), prefill,
                          f"{r.storage_s:.2f} s", breakeven, wins)
        console.print(table)
        if g.note:
            console.print(f"  {g.note}")
        if g.breakeven_tokens == MAX_TOKENS:
            console.print("  a remote hit never beats recompute at this bandwidth")
        elif g.breakeven_tokens:
            console.print(f"  a remote hit of fewer than {g.breakeven_tokens:,} tokens loses to "
                          "recompute at this bandwidth")
        for tokens in sorted(set(g.min_retrieve_tokens.values())):
            hosts = [h for h, t in g.min_retrieve_tokens.items() if t == tokens]
            console.print(f"  min_retrieve_tokens {tokens:,} (LMCache recomputes shorter hits) "
                          f"on {_hosts(hosts)}")
        for tokens in sorted(set(g.retrieve_advice.values())):
            hosts = [h for h, t in g.retrieve_advice.items() if t == tokens]
            console.print(f"  min_retrieve_tokens not rendered on {_hosts(hosts)} (LMCache "
                          f"reads every hit): the break-even {tokens:,} rests on unmeasured "
                          f"{' and '.join(g.unmeasured)}; measure and set them, or set "
                          "lmcache_min_retrieve_tokens")
    if plan.routing:
        _show_routing(plan.routing, console)
    for daily in plan.restarts:
        console.print(
            f"[bold]Daily restart[/] of {daily.model} on {_hosts(daily.hosts)}: {daily.slots} "
            f"host(s) at a time; about {hours(daily.host_seconds)} per host "
            f"({hours(daily.instance_seconds)} per instance, estimated), the whole roll about "
            f"{hours(daily.roll_seconds)} of the {hours(daily.window_seconds)} each host waits "
            "for its turn" + ("" if daily.fits else " [yellow](does not fit)[/]"))
    console.print("[bold]Rollout[/]")
    for i, step in enumerate(plan.rollout, 1):
        serial = f" (serial {step.serial})" if step.serial else ""
        console.print(f"  {i}. {step.phase}{serial}: {_hosts(step.hosts)}")
    for w in merge_per_host(plan.warnings, (h.host for h in plan.hosts)):
        console.print(f"[yellow]warning:[/] {escape(w)}")


def _shares(s: Shares) -> str:
    parts = [(s.holder, "HBM/L1"), (s.host_l1, "host L1"), (s.remote, "S3"),
             (s.recompute, "recompute")]
    return ", ".join(f"{share:.0%} {what}" if share >= 0.005 else f"<1% {what}"
                     for share, what in parts if share > 0)


def _kilo(tokens: int) -> str:
    return f"{tokens // 1024}K"


def _show_routing(estimates: list[RoutingEstimate], console: Console) -> None:
    """Where a repeated prefix is answered with and without the routers: an estimate, one
    table for every serving group (context lengths with the same shares folded into one
    row), its assumptions printed under it once."""
    first = estimates[0]
    other = any(r.other_router for e in estimates for r in e.rows)
    table = Table(title=f"Routing estimate (not measured): where a repeated prefix is "
                        f"answered, {first.instances} instances on {first.hosts} hosts, "
                        f"{first.logic} on {first.routers} router(s)", title_justify="left")
    for col in ("serving group", "context", "without a router", f"with {first.logic}",
                *(["at another router"] if other else [])):
        table.add_column(col)
    for e in estimates:
        group = f"{e.model} on {e.device}" + (
            f" (S3 from {e.breakeven_tokens:,} tokens)"
            if e.remote_tier and e.breakeven_tokens not in (None, MAX_TOKENS) else "")
        runs: list[tuple[list[int], tuple[str, ...]]] = []
        for r in e.rows:
            cells = (_shares(r.without), _shares(r.routed),
                     *([_shares(r.other_router) if r.other_router else "-"] if other else []))
            if runs and runs[-1][1] == cells:
                runs[-1][0].append(r.context_tokens)
            else:
                runs.append(([r.context_tokens], cells))
        for i, (lengths, cells) in enumerate(runs):
            span = _kilo(lengths[0]) if len(lengths) == 1 else \
                f"{_kilo(lengths[0])}–{_kilo(lengths[-1])}"
            table.add_row(escape(group) if i == 0 else "", span, *cells)
    console.print(table)
    said: dict[str, None] = {}
    for e in estimates:
        said.update(dict.fromkeys(e.assumptions))
    for line in said:
        console.print(f"  assumes {escape(line)}")
