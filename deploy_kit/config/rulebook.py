"""What the families of validation rules share (config/rules_*.py, and render/knobs.py for
the rules that need the renderers): the decorator that lists a family's rules, the file
that sets a key, how a majority value is weighed, and the patterns two families match."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from typing import Any

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


def weight(site: Site, members: list[Host], key: str) -> tuple[int, int, int]:
    """How much a value is the fleet's: its hosts, then (a tie) fewest set in host_vars/
    (the odd one out is the per-host override), then most left at the default (a value
    set in hosts.yml for one host is the override, not the default it differs from)."""
    return (len(members), -sum("host_vars" in src(site, h, key) for h in members),
            sum(key not in h.sources for h in members))


def agree(site: Site, hosts: list[Host], keys: tuple[str, ...], scope: str
          ) -> Iterator[Problem]:
    """Each key one value on `hosts`: every host off the majority value is a problem."""
    if len(hosts) < 2:
        return
    for key in keys:
        try:  # the common case, one value fleet-wide: one C-level pass
            if len({getattr(h.config, key) for h in hosts}) < 2:
                continue
        except TypeError:  # a dict or list value: grouped below by its JSON
            pass
        values: dict[Any, list[Host]] = {}
        for host in hosts:
            value = getattr(host.config, key)
            if isinstance(value, dict | list):  # rope scaling: compared as its JSON
                value = json.dumps(value, sort_keys=True, default=str)
            values.setdefault(value, []).append(host)
        if len(values) > 1:
            majority = max(values, key=lambda v: weight(site, values[v], key))
            for value, members in values.items():
                if value == majority:
                    continue
                for host in members:
                    yield Problem(src(site, host, key), key,
                                  f"{host.name} has {value!r}, others have {majority!r}",
                                  f"use one value on {scope} (cache keys would not match)")


# A key that names a credential (rules_secrets.no_secrets_in_plain_files; knobs.py leaves
# such keys to it). `tokens` (plural) is a count in LMCache's and vLLM's names
# (min_retrieve_tokens), not a key
SECRET_NAME = re.compile(r"(secret|token(?!s)|passw|credential|access_key|api_key|private_key|"
                         r"session_key|auth)", re.IGNORECASE)

# vLLM's data-parallel flags (vllm/engine/arg_utils.py: --data-parallel-size / -dp and the
# --data-parallel-* family): one engine spanning the host's devices, the job instances do
# (rules_serving.instances_fit_devices; knobs.py leaves them to it)
DATA_PARALLEL = re.compile(r"^(-dp|--data[-_]parallel[-_][a-z_-]+)(=.*)?$|^-dp\d+$")
