import struct
import zlib

from deploy_kit.bench.png import bar_chart
from deploy_kit.bench.storage_worker import percentile, summarise


def test_bar_chart_is_a_valid_png_of_the_asked_size() -> None:
    png = bar_chart([[1.0, 2.0], [0.5, 0.0]], width=64, height=32)
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    _length, kind = struct.unpack(">I4s", png[8:16])
    assert kind == b"IHDR" and struct.unpack(">II", png[16:24]) == (64, 32)
    idat_start = png.index(b"IDAT") + 4
    idat_len = struct.unpack(">I", png[idat_start - 8:idat_start - 4])[0]
    raw = zlib.decompress(png[idat_start:idat_start + idat_len])
    assert len(raw) == 32 * (1 + 64 * 3)


def test_summary_figures() -> None:
    assert percentile([3.0, 1.0, 2.0], 0.5) == 2.0
    row = summarise("GET", [0.1, 0.2, 0.3, 0.4], 4_000_000_000, 2.0)
    assert row["gb_per_s"] == 2.0 and row["ops_per_s"] == 2.0 and row["p99_ms"] == 400.0
