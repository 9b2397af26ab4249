"""What a verify run covers: `--check` ids and `--limit` patterns, refused when they name
nothing (pure). A selection that matches nothing is a usage error, never an empty green."""

from __future__ import annotations

import re
from fnmatch import fnmatchcase

from deploy_kit.config.site import Site

# findings of `--roundtrip`, not of a registered check
ROUNDTRIP_CHECKS = ("lmcache-roundtrip", "lmcache-object-names", "lmcache-seed-mismatch")


class SelectionError(ValueError):
    """A --check or --limit value that names nothing; the message lists what exists."""


def check_ids(requested: list[str] | None, known: list[str]) -> set[str] | None:
    if not requested:
        return None
    everything = sorted({*known, *ROUNDTRIP_CHECKS})
    unknown = sorted(set(requested) - set(everything))
    if unknown:
        raise SelectionError(f"no check named {', '.join(unknown)}; checks: "
                             f"{', '.join(everything)}")
    return set(requested)


# Ansible's subscripts: `group[0]`, `group[-1]`, `group[1:3]`, `group[1-3]`
_SUBSCRIPT = re.compile(r"\[(?:-?\d+|\d*[:-]\d*)\]$")


def limited_hosts(site: Site, pattern: str) -> set[str]:
    """Hosts an Ansible `--limit` names, with Ansible's pattern semantics: comma- or
    colon-separated host names, group names, shell-style globs of either, or `~regex`;
    `&term` intersects, `!term` excludes (with only those, from every host). Each term must
    match at least one host; a subscript (`group[0]`) is refused with a hint."""
    groups = sorted({g for h in site.hosts.values() for g in h.groups})
    terms = [t.strip() for t in pattern.replace(":", ",").split(",") if t.strip()]
    if not terms:
        raise SelectionError("--limit names no host")
    plain: set[str] = set()
    narrowed: list[set[str]] = []
    excluded: set[str] = set()
    for term in terms:
        kind, name = (term[0], term[1:]) if term[0] in "&!" else ("", term)
        if not name.startswith("~") and _SUBSCRIPT.search(name):
            raise SelectionError(f"--limit {term!r}: subscripts are not supported here; name "
                                 "the hosts, or use a glob")
        matched = _matching(site, name)
        if not matched:
            raise SelectionError(f"--limit {term!r} matches no host; hosts: "
                                 f"{', '.join(sorted(site.hosts))}; groups: {', '.join(groups)}")
        if kind == "&":
            narrowed.append(matched)
        elif kind == "!":
            excluded |= matched
        else:
            plain |= matched
    chosen = plain if any(t[0] not in "&!" for t in terms) else set(site.hosts)
    for subset in narrowed:
        chosen &= subset
    chosen -= excluded
    if not chosen:
        raise SelectionError(f"--limit {pattern!r} leaves no host")
    return chosen


def _matching(site: Site, name: str) -> set[str]:
    """Hosts named by one term: a host or group name or glob, or `~regex` (matched from
    the start, as Ansible does)."""
    if name.startswith("~"):
        try:
            regex = re.compile(name[1:])
        except re.error as exc:
            raise SelectionError(f"--limit {name!r}: not a regular expression ({exc})") from None

        def hit(candidate: str) -> bool:
            return regex.match(candidate) is not None
    else:
        def hit(candidate: str) -> bool:
            return fnmatchcase(candidate, name)
    return {n for n, h in site.hosts.items() if hit(n) or any(hit(g) for g in h.groups)}
