"""A dependency-free PNG bar chart (pure: values in, PNG bytes out). No text is drawn;
the JSON next to it carries the numbers and the legend."""

from __future__ import annotations

import struct
import zlib

PALETTE = [(31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40), (148, 103, 189)]


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(
        ">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def bar_chart(groups: list[list[float]], width: int = 800, height: int = 400) -> bytes:
    """groups: one list of bar values per group; bar i of every group gets colour i."""
    pixels = [[(255, 255, 255)] * width for _ in range(height)]
    top = max((v for g in groups for v in g), default=0.0) or 1.0
    margin, gap = 20, 16
    n_bars = max((len(g) for g in groups), default=1)
    group_width = (width - 2 * margin - gap * max(0, len(groups) - 1)) / max(1, len(groups))
    bar_width = max(1, int(group_width / n_bars))
    for y in range(margin, height - margin):  # axis
        pixels[y][margin - 2] = (0, 0, 0)
    for x in range(margin - 2, width - margin):
        pixels[height - margin][x] = (0, 0, 0)
    for gi, group in enumerate(groups):
        x0 = int(margin + gi * (group_width + gap))
        for bi, value in enumerate(group):
            bar_height = int((height - 2 * margin) * value / top)
            colour = PALETTE[bi % len(PALETTE)]
            for y in range(height - margin - bar_height, height - margin):
                row = pixels[y]
                for x in range(x0 + bi * bar_width, x0 + (bi + 1) * bar_width - 2):
                    row[x] = colour
    raw = b"".join(b"\x00" + bytes(c for px in row for c in px) for row in pixels)
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header) +
            _chunk(b"IDAT", zlib.compress(raw, 6)) + _chunk(b"IEND", b""))
