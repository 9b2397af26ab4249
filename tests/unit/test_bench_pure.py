from pathlib import Path

from deploy_kit.bench import storage_chart
from deploy_kit.bench.storage_worker import percentile, summarise


def test_storage_chart_has_axes_units_legend_and_a_bar_per_client_and_case(
        tmp_path: Path) -> None:
    rows = [{"client": c, "op": op, "threads": t, "target": "lmcache.s3.t", "gb_per_s": v}
            for c, v0 in (("awscrt", 1.0), ("boto3", 0.5)) for op in ("PUT", "GET")
            for t, v in ((1, v0), (4, 2 * v0))]
    by_address = {"client": "awscrt", "op": "GET", "threads": 1, "target": "10.0.0.1",
                  "gb_per_s": 9.0}
    result = {"results": [*rows, by_address],
              "name": "lmcache.s3.t", "object_bytes": 2_097_152, "measured_from": "lab3"}
    fig = storage_chart.figure(result)
    ax = fig.axes[0]
    assert ax.get_ylabel() == "throughput (GB/s)" and "2,097,152 B" in ax.get_title()
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["awscrt", "boto3"]
    heights = sorted(round(p.get_height(), 2) for p in ax.patches)
    assert heights == [0.5, 0.5, 1.0, 1.0, 1.0, 1.0, 2.0, 2.0]  # the 9.0 by address is not
    path = storage_chart.plot(result, tmp_path / "storage.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_summary_figures() -> None:
    assert percentile([3.0, 1.0, 2.0], 0.5) == 2.0
    row = summarise("GET", [0.1, 0.2, 0.3, 0.4], 4_000_000_000, 2.0)
    assert row["gb_per_s"] == 2.0 and row["ops_per_s"] == 2.0 and row["p99_ms"] == 400.0
