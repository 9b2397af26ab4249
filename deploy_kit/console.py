"""The one rich console for humans (stderr); stdout is kept for machine output (--json)."""

from __future__ import annotations

from rich.console import Console

console = Console(stderr=True, highlight=False)


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(n) < 1024 or unit == "PiB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    return f"{n} PiB"
