"""Human view of a Plan (rich tables on stderr)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from deploy_kit.console import human_bytes
from deploy_kit.plan.plan import Plan


def _show_hosts(plan: Plan, console: Console) -> None:
    """Per host: its instances, and per device of one instance what vLLM must fit there;
    LMCache's DRAM is the in-process pinned pool or the server's L1, never both."""
    hosts = Table(title="Serving hosts (per device: weights, KV capacity, max-length "
                        "requests that fit)", title_justify="left")
    for col in ("host", "accelerator", "instances × devices", "block", "weights",
                "KV capacity", "requests", "LMCache DRAM", "/dev/shm (LMCache)"):
        hosts.add_column(col)
    notes = []
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
        hosts.add_row(h.host, f"{h.accelerator} ({h.device})", f"{h.instances} × {h.workers}",
                      str(h.block_size), weights, capacity, requests, dram,
                      human_bytes(h.shm_bytes))
        if h.fit_note:
            notes.append(f"  {h.host}: {h.fit_note}")
    console.print(hosts)
    for note in notes:
        console.print(note)


def show_plan(plan: Plan, console: Console) -> None:
    s = plan.site
    console.print(f"[bold]Site[/] {s['name']}: {s['hosts']} hosts, S3 name [cyan]{s['s3_fqdn']}"
                  f"[/], remote_url [cyan]{s['remote_url']}[/], DNS {s['dns_mode']}, "
                  f"Ceph {s['ceph_version']} ({s['ceph_rgw_mode']})")
    for m in plan.models:
        console.print(f"[bold]Model[/] {m.model} (TP {m.tensor_parallel} × PP "
                      f"{m.pipeline_parallel}, KV {m.kv_dtype}) on {', '.join(m.hosts)}")
        console.print(f"  {m.bytes_per_token:,} B/token; a {m.chunk_tokens}-token chunk is "
                      f"{m.objects_per_chunk} object(s) of {human_bytes(m.object_bytes)} "
                      f"({m.object_bytes:,} B), {human_bytes(m.chunk_bytes)} per chunk")
        console.print(f"  S3 requests per chunk through the concentrators: "
                      f"{m.s3_put_requests_per_chunk} to store, {m.s3_get_requests_per_chunk} "
                      f"to read (awscrt splits objects above 8 MiB into multipart parts and "
                      f"ranged GETs)")
        console.print(f"  {m.target_tokens:,} cached tokens need {human_bytes(m.storage_bytes)}"
                      f" ({human_bytes(m.storage_raw_bytes)} raw); objects are named "
                      f"{m.object_name_pattern}")
    _show_hosts(plan, console)
    pools = Table(title="RGW pools", title_justify="left")
    for col in ("pool", "pg_num", "size", "min_size", "application"):
        pools.add_column(col)
    for p in plan.pools:
        pools.add_row(p.name, str(p.pg_num), str(p.size), str(p.min_size), p.application)
    console.print(pools)
    per_osd = f", {plan.pgs_per_osd:.0f} per OSD" if plan.pgs_per_osd is not None else ""
    console.print(f"PG replicas: {plan.pg_replicas:,}{per_osd}")
    d = plan.dns
    console.print(f"[bold]DNS[/] {' and '.join(d['names'])} → {d['expected_a_records']} A records "
                  f"({', '.join(d['addresses'])}) from {', '.join(d['servers'])}")
    for g in plan.serving_groups:
        table = Table(title=f"Remote KV vs recompute: {g.model} on {g.device} (TP "
                            f"{g.tensor_parallel}; {g.effective_tflops:g} TFLOPS per device, "
                            f"{g.tflops_source}; GET {g.storage_gbps:g} Gbit/s per host) "
                            f"on {', '.join(g.hosts)}", title_justify="left")
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
    console.print("[bold]Rollout[/]")
    for i, step in enumerate(plan.rollout, 1):
        serial = f" (serial {step.serial})" if step.serial else ""
        console.print(f"  {i}. {step.phase}{serial}: {', '.join(step.hosts)}")
    for w in plan.warnings:
        console.print(f"[yellow]warning:[/] {w}")
