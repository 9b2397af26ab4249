"""What a family of validation rules needs, without importing rules.py (which registers
every family: rules.py imports them, so they may not import it)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from deploy_kit.config.site import Host, Site
from deploy_kit.core.errors import Problem

Rule = Callable[[Site], Iterator[Problem]]


def collector() -> tuple[list[Rule], Callable[[Rule], Rule]]:
    """A family's rule list and the decorator that adds to it."""
    rules: list[Rule] = []

    def rule(fn: Rule) -> Rule:
        rules.append(fn)
        return fn

    return rules, rule


def src(site: Site, host: Host, key: str) -> str:
    """The file that sets `key` for `host` (the hosts file for a default)."""
    return host.source(key, site.hosts_file)
