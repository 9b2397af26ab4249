"""The storage benchmark's chart: GB/s per client, operation and thread count (matplotlib,
the `bench` extra)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def figure(result: dict[str, Any]) -> Any:
    """Grouped bars: one group per (operation, threads), one bar per client; axes in GB/s
    and threads, a legend naming the clients, the object size and target in the title."""
    from deploy_kit.bench.ttft_report import _pyplot

    rows = [r for r in result["results"] if r.get("op") in ("PUT", "GET")
            and r.get("target") == result["name"]]
    clients = sorted({r["client"] for r in rows})
    groups = sorted({(r["op"], r["threads"]) for r in rows},
                    key=lambda g: (g[0] != "PUT", g[1]))
    fig, ax = _pyplot().subplots(figsize=(8, 4.5), dpi=110)
    width = 0.8 / max(1, len(clients))
    for i, client in enumerate(clients):
        values = [next((r["gb_per_s"] for r in rows if r["client"] == client
                        and (r["op"], r["threads"]) == g), 0.0) for g in groups]
        ax.bar([x + (i - (len(clients) - 1) / 2) * width for x in range(len(groups))], values,
               width, label=client)
    ax.set_xticks(range(len(groups)), [f"{op}\n{threads} thread(s)" for op, threads in groups])
    ax.set_ylabel("throughput (GB/s)")
    ax.set_xlabel("operation and client threads")
    ax.set_title(f"S3 through {result['name']}: {result['object_bytes']:,} B objects, "
                 f"from {result['measured_from']}", fontsize=10)
    ax.grid(True, axis="y", alpha=0.3)
    if clients:
        ax.legend(title="client", fontsize=8)
    fig.tight_layout()
    return fig


def plot(result: dict[str, Any], path: Path) -> Path:
    from deploy_kit.bench.ttft_report import _pyplot

    plt = _pyplot()
    fig = figure(result)
    try:
        fig.savefig(path)
    finally:
        plt.close(fig)
    return path
