"""Short, lossless host lists for people: runs of numbered names become Ansible's own range
pattern (`gpu-[001:128]`), so a 1,000-host plan names each group in one line that an
operator can paste back into `--limit`."""

from __future__ import annotations

import re
from collections.abc import Iterable

_NUMBERED = re.compile(r"^(.*?)(\d+)([^\d]*)$")


def compact_hosts(names: Iterable[str]) -> str:
    """`a1, a2, a3, b` → `a[1:3], b`. Only runs of consecutive numbers of one width
    collapse (Ansible's range `[01:03]` keeps the zero padding); every name is kept."""
    runs: dict[tuple[str, int, str], list[int]] = {}
    plain: list[str] = []
    for name in dict.fromkeys(names):  # order-preserving de-duplication
        match = _NUMBERED.match(name)
        if match:
            prefix, digits, suffix = match.groups()
            runs.setdefault((prefix, len(digits), suffix), []).append(int(digits))
        else:
            plain.append(name)
    parts: list[tuple[str, str]] = [(name, name) for name in plain]
    for (prefix, width, suffix), numbers in runs.items():
        numbers.sort()
        start = prev = numbers[0]
        for n in [*numbers[1:], None]:
            if n is not None and n == prev + 1:
                prev = n
                continue
            low, high = f"{start:0{width}d}", f"{prev:0{width}d}"
            if prev - start >= 2:
                text = f"{prefix}[{low}:{high}]{suffix}"
            else:  # two in a row read better as two names
                text = ", ".join(f"{prefix}{x:0{width}d}{suffix}" for x in range(start, prev + 1))
            parts.append((f"{prefix}{low}{suffix}", text))
            if n is not None:
                start = prev = n
    return ", ".join(text for _, text in sorted(parts))


_TOKEN = re.compile(r"[A-Za-z0-9_.\-]+")


def merge_per_host(lines: Iterable[str], hosts: Iterable[str]) -> list[str]:
    """Lines that differ only in the one host name they mention become one line naming
    every such host (`… (gpu-[001:128]): …`); the rest stay as they are, in order."""
    known = set(hosts)
    groups: dict[str, list[str]] = {}
    for line in lines:
        named = [t for t in dict.fromkeys(_TOKEN.findall(line)) if t in known]
        if len(named) == 1:
            template = re.sub(rf"(?<![A-Za-z0-9_.\-]){re.escape(named[0])}(?![A-Za-z0-9_.\-])",
                              "\0", line)
            groups.setdefault(template, []).append(named[0])
        else:
            groups.setdefault(line, [])
    return [template.replace("\0", compact_hosts(names)) if names else template
            for template, names in groups.items()]
