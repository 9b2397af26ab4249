"""What a verify run covers: `--check` ids and `--limit` patterns, refused when they name
nothing (pure). A selection that matches nothing is a usage error, never an empty green."""

from __future__ import annotations

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


def limited_hosts(site: Site, pattern: str) -> set[str]:
    """Hosts an Ansible-style `--limit` names: comma- or colon-separated host names, group
    names or shell-style globs of either; each term must match at least one host."""
    groups = sorted({g for h in site.hosts.values() for g in h.groups})
    chosen: set[str] = set()
    for term in (t.strip() for t in pattern.replace(":", ",").split(",")):
        if not term:
            continue
        matched = {n for n, h in site.hosts.items()
                   if fnmatchcase(n, term) or any(fnmatchcase(g, term) for g in h.groups)}
        if not matched:
            raise SelectionError(f"--limit {term!r} matches no host; hosts: "
                                 f"{', '.join(sorted(site.hosts))}; groups: {', '.join(groups)}")
        chosen |= matched
    return chosen
