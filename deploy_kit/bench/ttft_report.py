"""`bench ttft` results: the JSON document, its schema check, the table and the plot (pure:
rows in, document/table/PNG out; no host contacted)."""

from __future__ import annotations

import itertools
import math
import statistics
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.table import Table

SCHEMA = "deploykit-bench-ttft/1"
CASES = ("cold", "dram_hit", "remote_hit_restart", "remote_hit_other_host", "dram_only_control")
LABELS = {"cold": "cold prefill (host A)",
          "dram_hit": "LMCache DRAM hit (host A, same processes)",
          "remote_hit_restart": "remote hit after restarting vLLM + LMCache (host A)",
          "remote_hit_other_host": "remote hit on host B (never saw the prompt)",
          "dram_only_control": "DRAM-only control: cold prefill on host B"}
# `bench ttft --via-router` (bench/ttft_router.py): the same document and chart, its cases
ROUTER_SCHEMA = "deploykit-bench-ttft-router/1"
ROUTER_CASES = ("router_cold", "router_repeat", "direct_cold", "direct_repeat",
                "direct_random_repeat")
ROUTER_LABELS = {"router_cold": "cold prefill through the router",
                 "router_repeat": "repeat through the router",
                 "direct_cold": "cold prefill direct to the router repeat's instance",
                 "direct_repeat": "repeat direct to that instance",
                 "direct_random_repeat": "repeat direct to a random instance (no router)"}
ROUTER_TARGET = 1.5  # the lab's acceptance: router repeat <= 1.5 x direct repeat
ROUTER_ROW_KEYS: dict[str, type | tuple[type, ...]] = {
    "via": str, "instance": (str, type(None))}
ROW_KEYS: dict[str, type | tuple[type, ...]] = {
    "context_tokens": int, "case": str, "repeat": int, "host": str,
    "ttft_s": (float, type(None)), "tpot_s": (float, type(None)),
    "hit_tokens": (int, type(None)), "local_hit_tokens": (int, type(None)),
    "prompt_tokens": (int, type(None)), "completion_tokens": (int, type(None)),
    "error": (str, type(None))}


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def routed(doc: dict[str, Any]) -> bool:
    """A `--via-router` document."""
    return doc.get("schema") == ROUTER_SCHEMA


def cases_of(doc: dict[str, Any]) -> tuple[str, ...]:
    return ROUTER_CASES if routed(doc) else CASES


def _labels(doc: dict[str, Any]) -> dict[str, str]:
    return ROUTER_LABELS if routed(doc) else LABELS


def summarise(results: list[dict[str, Any]], cases: tuple[str, ...] = CASES,
              cold_case: str = "cold") -> list[dict[str, Any]]:
    """Median TTFT/TPOT and hit tokens per (context length, case), plus TTFT relative to cold."""
    out: list[dict[str, Any]] = []
    lengths = sorted({r["context_tokens"] for r in results})
    for length in lengths:
        rows = [r for r in results if r["context_tokens"] == length]
        cold = _median([r["ttft_s"] for r in rows if r["case"] == cold_case and
                        r["ttft_s"] is not None])
        for case in cases:
            mine = [r for r in rows if r["case"] == case]
            if not mine:
                continue
            times = [r["ttft_s"] for r in mine if r["ttft_s"] is not None]
            ttft = _median(times)
            tpot = _median([r["tpot_s"] for r in mine if r["tpot_s"] is not None])
            hits = [r["hit_tokens"] for r in mine if r["hit_tokens"] is not None]
            out.append({"context_tokens": length, "case": case, "n": len(mine),
                        "ttft_s": ttft, "tpot_s": tpot,
                        # the spread of the repeats: a median alone hid a noisy run
                        "ttft_min_s": min(times) if times else None,
                        "ttft_max_s": max(times) if times else None,
                        "hit_tokens": int(statistics.median(hits)) if hits else None,
                        "ttft_vs_cold": (ttft / cold) if ttft is not None and cold else None,
                        "errors": sum(1 for r in mine if r["error"])})
    return out


REMOTE_CASES = ("remote_hit_restart", "remote_hit_other_host")
OVERHEAD_TARGET = 1.5  # the lab's goal: other-host hit <= DRAM hit + 1.5 x storage floor


def with_storage_floor(summary: list[dict[str, Any]], storage: dict[str, Any] | None
                       ) -> list[dict[str, Any]]:
    """Each remote row's storage floor (its KV bytes at the GET throughput measured in the
    same run) and how its TTFT compares with the DRAM hit plus that floor: the remote
    path's own overhead, visible."""
    if not storage or not storage.get("get_gb_per_s"):
        return summary
    rate = storage["get_gb_per_s"] * 1e9
    dram = {s["context_tokens"]: s["ttft_s"] for s in summary if s["case"] == "dram_hit"}
    for row in summary:
        if row["case"] not in REMOTE_CASES:
            continue
        floor = row["context_tokens"] * storage["bytes_per_token"] / rate
        row["storage_floor_s"] = floor
        base = dram.get(row["context_tokens"])
        row["vs_dram_plus_floor"] = (row["ttft_s"] / (base + floor)
                                     if row["ttft_s"] is not None and base is not None
                                     else None)
        row["overhead_floors"] = ((row["ttft_s"] - base) / floor
                                  if row["ttft_s"] is not None and base is not None
                                  else None)
    return summary


def document(*, site: str, run_id: str, started: str, model: str, hosts: dict[str, str | None],
             lengths: list[int], repeats: int, max_tokens: int, token_ids: tuple[int, int],
             manifest: dict[str, Any], results: list[dict[str, Any]],
             purged: dict[int, int], notes: list[str], skipped_cases: dict[str, str],
             storage: dict[str, Any] | None = None) -> dict[str, Any]:
    from deploy_kit import __version__

    return {"schema": SCHEMA, "deploykit_version": __version__, "site": site,
            "generated": datetime.now(UTC).isoformat(timespec="seconds"),
            "run_id": run_id, "started": started,
            "model": model, "hosts": hosts, "lengths": lengths, "repeats": repeats,
            "max_tokens": max_tokens, "token_ids": list(token_ids),
            "cases": {c: _label(c, skipped_cases) for c in CASES if c not in skipped_cases},
            "skipped_cases": skipped_cases, "manifest": manifest, "results": results,
            "summary": with_storage_floor(summarise(results), storage), "storage": storage,
            "purged_objects": {str(k): v for k, v in purged.items()}, "notes": notes}


def routing_summary(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per context length: how often the router's repeat went back to the cold request's
    instance, how often the random instance held the prompt, and the median over repeats of
    router repeat TTFT / direct repeat TTFT to the same instance (the router's own cost)."""
    out = []
    for length in sorted({r["context_tokens"] for r in results}):
        rows = [r for r in results if r["context_tokens"] == length]
        repeats = [r for r in rows if r["case"] == "router_repeat"]
        randoms = [r for r in rows if r["case"] == "direct_random_repeat"]
        ratios = [r["vs_direct_repeat"] for r in repeats
                  if r.get("vs_direct_repeat") is not None]
        ratio = _median(ratios)
        out.append({"context_tokens": length, "n": len(repeats),
                    "same_instance": sum(1 for r in repeats if r.get("same_instance")),
                    "random_was_holder": sum(1 for r in randoms if r.get("holder")),
                    "router_vs_direct_repeat": ratio, "target": ROUTER_TARGET,
                    "within_target": None if ratio is None else ratio <= ROUTER_TARGET})
    return out


def router_document(*, site: str, run_id: str, started: str, model: str,
                    router: dict[str, str], instances: list[str], lengths: list[int],
                    repeats: int, max_tokens: int, token_ids: tuple[int, int],
                    manifest: dict[str, Any], results: list[dict[str, Any]],
                    notes: list[str]) -> dict[str, Any]:
    """`--via-router`'s document: the protocol's form (results, summary, cases), its own
    schema and cases, and `routing` (routing_summary)."""
    from deploy_kit import __version__

    return {"schema": ROUTER_SCHEMA, "deploykit_version": __version__, "site": site,
            "generated": datetime.now(UTC).isoformat(timespec="seconds"),
            "run_id": run_id, "started": started, "model": model, "hosts": router,
            "instances": instances, "lengths": lengths, "repeats": repeats,
            "max_tokens": max_tokens, "token_ids": list(token_ids),
            "cases": dict(ROUTER_LABELS), "skipped_cases": {}, "manifest": manifest,
            "results": results,
            "summary": summarise(results, ROUTER_CASES, "router_cold"),
            "routing": routing_summary(results), "notes": notes}


def _label(case: str, skipped_cases: dict[str, str]) -> str:
    if case == "dram_only_control" and "remote_hit_other_host" in skipped_cases:
        return "DRAM-only control: cold prefill of a fresh prompt (host A)"
    return LABELS[case]


def problems(doc: dict[str, Any]) -> list[str]:
    """What is wrong with a document against SCHEMA (empty: valid)."""
    found = []
    for key in ("schema", "site", "model", "hosts", "lengths", "repeats", "manifest",
                "results", "summary"):
        if key not in doc:
            found.append(f"missing {key}")
    if doc.get("schema") not in (SCHEMA, ROUTER_SCHEMA):
        found.append(f"schema {doc.get('schema')!r}")
    keys = ROW_KEYS | (ROUTER_ROW_KEYS if routed(doc) else {})
    for i, row in enumerate(doc.get("results", [])):
        for key, kind in keys.items():
            if key not in row:
                found.append(f"results[{i}] missing {key}")
            elif not isinstance(row[key], kind) or isinstance(row[key], bool):
                found.append(f"results[{i}].{key} is {type(row[key]).__name__}")
        if row.get("case") not in cases_of(doc):
            found.append(f"results[{i}].case {row.get('case')!r}")
    if routed(doc) and "routing" not in doc:
        found.append("missing routing")
    return found


def _cell(row: dict[str, Any] | None) -> str:
    if row is None:
        return "-"
    if row["ttft_s"] is None:
        return "error"
    hits = "?" if row["hit_tokens"] is None else f"{row['hit_tokens']:,}"
    spread = (f" [{row['ttft_min_s']:.3f}-{row['ttft_max_s']:.3f}]"
              if row.get("n", 1) > 1 and row.get("ttft_min_s") is not None else "")
    return f"{row['ttft_s']:.3f} s{spread} ({hits} hit)"


def router_table(doc: dict[str, Any]) -> Table:
    out = Table(title=f"TTFT through the router ({doc['hosts']['router']} as "
                      f"{doc['hosts']['name']}) vs direct: {doc['model']} on {doc['site']} "
                      f"(median of {doc['repeats']} \\[min-max])", title_justify="left")
    out.add_column("context tokens", justify="right")
    for case in ROUTER_CASES:
        out.add_column(case, justify="right")
    out.add_column("repeat on the cold's instance", justify="right")
    out.add_column("random instance held it", justify="right")
    out.add_column(f"router / direct repeat (goal ≤ {ROUTER_TARGET})", justify="right")
    by = {(s["context_tokens"], s["case"]): s for s in doc["summary"]}
    for r in doc["routing"]:
        length, ratio = r["context_tokens"], r["router_vs_direct_repeat"]
        out.add_row(f"{length:,}", *[_cell(by.get((length, c))) for c in ROUTER_CASES],
                    f"{r['same_instance']} of {r['n']}", f"{r['random_was_holder']} of {r['n']}",
                    "-" if ratio is None else f"{ratio:.2f}")
    return out


def table(doc: dict[str, Any]) -> Table:
    if routed(doc):
        return router_table(doc)
    cases = [c for c in CASES if c in doc["cases"]]
    out = Table(title=f"TTFT by context length: {doc['model']} on {doc['site']} "
                      f"(median of {doc['repeats']} [min-max])", title_justify="left")
    out.add_column("context tokens", justify="right")
    for case in cases:
        out.add_column(case, justify="right")
    out.add_column("other host / cold", justify="right")
    out.add_column("storage floor", justify="right")
    out.add_column("other host / (DRAM + floor)", justify="right")
    by = {(s["context_tokens"], s["case"]): s for s in doc["summary"]}
    for length in sorted({s["context_tokens"] for s in doc["summary"]}):
        other = by.get((length, "remote_hit_other_host"), {})
        ratio = other.get("ttft_vs_cold")
        floor = other.get("storage_floor_s")
        overhead = other.get("overhead_floors")
        out.add_row(f"{length:,}", *[_cell(by.get((length, c))) for c in cases],
                    f"{ratio:.2f}" if ratio is not None else "-",
                    f"{floor:.3f} s" if floor is not None else "-",
                    (f"{other['vs_dram_plus_floor']:.2f} (DRAM + {overhead:.1f} floors; "
                     f"goal {OVERHEAD_TARGET} at 4K)")
                    if other.get("vs_dram_plus_floor") is not None and overhead is not None
                    else "-")
    return out


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    return plt


def crossover(cold: list[tuple[int, float]], remote: list[tuple[int, float]]
              ) -> float | None:
    """The context length where the remote hit starts to beat a cold prefill, interpolated
    on the chart's log-log axes; None when it never crosses within the measured lengths."""
    both = sorted(set(dict(cold)) & set(dict(remote)))
    gap = [(n, math.log(dict(remote)[n]) - math.log(dict(cold)[n])) for n in both]
    for (n0, g0), (n1, g1) in itertools.pairwise(gap):
        if g0 >= 0 > g1:  # slower (or equal) at n0, faster at n1
            t = g0 / (g0 - g1)
            return float(2 ** (math.log2(n0) + t * (math.log2(n1) - math.log2(n0))))
    return None


def headline(doc: dict[str, Any]) -> str | None:
    """The one number a reader takes away: the other-host (else restart) remote hit against
    a cold prefill at the longest measured context; through a router, the router repeat
    against the direct repeat there."""
    if routed(doc):
        rows = [r for r in doc.get("routing", []) if r["router_vs_direct_repeat"] is not None]
        if not rows:
            return None
        top = max(rows, key=lambda r: r["context_tokens"])
        return (f"router repeat / direct repeat at {top['context_tokens']:,} tokens: "
                f"{top['router_vs_direct_repeat']:.2f} (goal ≤ {ROUTER_TARGET}); the repeat "
                f"went back to the cold request's instance {top['same_instance']} of "
                f"{top['n']} times")
    for case in ("remote_hit_other_host", "remote_hit_restart"):
        rows = [s for s in doc["summary"] if s["case"] == case and s.get("ttft_vs_cold")]
        if rows:
            top = max(rows, key=lambda s: s["context_tokens"])
            ratio = 1 / top["ttft_vs_cold"]
            where = "host B" if case == "remote_hit_other_host" else "after a restart"
            return (f"remote hit ({where}) at {top['context_tokens']:,} tokens: "
                    f"{ratio:.1f}x {'faster' if ratio >= 1 else 'slower'} than cold")
    return None


def figure(doc: dict[str, Any]) -> Any:
    """TTFT (log s) against context length (log2 tokens), one line per case with the
    repeats' spread as error bars; the legend beside the axes (never over the data), the
    crossover where a remote hit starts to beat cold marked, the headline ratio on it."""
    fig, ax = _pyplot().subplots(figsize=(11, 5), dpi=110)
    lines: dict[str, list[tuple[int, float]]] = {}
    labels = _labels(doc)
    for case in cases_of(doc):
        rows = sorted((s for s in doc["summary"] if s["case"] == case and s["ttft_s"]),
                      key=lambda s: s["context_tokens"])
        if not rows:
            continue
        xs = [s["context_tokens"] for s in rows]
        ys = [s["ttft_s"] for s in rows]
        low = [y - (s.get("ttft_min_s") or y) for y, s in zip(ys, rows, strict=True)]
        high = [(s.get("ttft_max_s") or y) - y for y, s in zip(ys, rows, strict=True)]
        ax.errorbar(xs, ys, yerr=[low, high], marker="o", capsize=3,
                    label=doc.get("cases", {}).get(case, labels[case]))
        lines[case] = list(zip(xs, ys, strict=True))
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    lengths = sorted({s["context_tokens"] for s in doc["summary"]})
    if lengths:
        ax.set_xticks(lengths, [f"{n // 1024}K" if n % 1024 == 0 else str(n)
                                for n in lengths])
    remote = lines.get("remote_hit_other_host") or lines.get("remote_hit_restart")
    if remote and lines.get("cold"):
        at = crossover(lines["cold"], remote)
        if at is not None:
            ax.axvline(at, color="grey", linestyle="--", linewidth=1,
                       label=f"break-even: remote hit beats cold above ~{at:,.0f} tokens")
    ax.set_xlabel("context length (tokens)")
    ax.set_ylabel("time to first token (s, log scale)")
    what = "through the router vs direct" if routed(doc) else "cold vs LMCache hits"
    ax.set_title(f"TTFT: {what}, {doc['model']} ({doc['site']})", fontsize=10)
    news = headline(doc)
    if news:
        ax.text(0.02, 0.98, news, transform=ax.transAxes, va="top", fontsize=9,
                bbox={"boxstyle": "round", "facecolor": "white", "alpha": 0.9})
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0)
    fig.tight_layout()
    return fig


def plot(doc: dict[str, Any], path: Path) -> Path:
    plt = _pyplot()
    fig = figure(doc)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path)
    finally:
        plt.close(fig)
    return path
