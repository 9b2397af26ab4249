"""Cross-host validation rules: config's families, listed in one place. Each rule is pure:
Site in, problems out.

The same constraints are asserted again by the roles' preflight tasks, so plain
`ansible-playbook` runs are protected too; here they fail before any host is contacted.
The two rules that need the renderers (render/knobs.py) join these in ops/site.py, whose
SITE_RULES is the complete list every command validates a site with.
"""

from __future__ import annotations

from collections.abc import Sequence

from deploy_kit.config import (
    rules_accelerators,
    rules_cache,
    rules_dns,
    rules_downloads,
    rules_encryption,
    rules_lmcache,
    rules_monitoring,
    rules_network,
    rules_paths,
    rules_ports,
    rules_router,
    rules_secrets,
    rules_serving,
    rules_site,
    rules_storage,
    rules_teams,
    rules_tls,
)
from deploy_kit.config.rulebook import Rule
from deploy_kit.config.site import Site
from deploy_kit.core.errors import Problem

# every family of config/, each a module of rules_*.py (the raw inventory's own rules,
# rules_inventory.RAW_RULES, check the files before a Site exists)
FAMILIES = (rules_site, rules_lmcache, rules_storage, rules_dns, rules_ports, rules_secrets,
            rules_tls, rules_accelerators, rules_serving, rules_paths, rules_network,
            rules_downloads, rules_monitoring, rules_cache, rules_router, rules_encryption,
            rules_teams)
RULES: tuple[Rule, ...] = tuple(check for family in FAMILIES for check in family.RULES)


def validate_site(site: Site, rules: Sequence[Rule]) -> list[Problem]:
    """Every problem the rules find, sorted (the order users see, whatever the rules' order)."""
    problems: list[Problem] = []
    for check in rules:
        problems.extend(check(site))
    return sorted(set(problems))
