"""The site every command opens: the inventory loaded and checked by every validation rule.

The complete rule list is assembled here, in the lowest layer that sees both halves:
config's families (config/rules.py) and the rules that need the renderers
(render/knobs.py). Nothing registers a rule by being imported, so the rules that run do not
depend on which modules a caller happened to import first.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from deploy_kit.config import rules as config_rules
from deploy_kit.config.open import load_site
from deploy_kit.config.rulebook import Rule
from deploy_kit.config.site import Site
from deploy_kit.config.vault import VaultSecrets
from deploy_kit.render import knobs

SITE_RULES: tuple[Rule, ...] = (*config_rules.RULES, *knobs.RULES)


def open_site(inventory: str | Sequence[str], vault: VaultSecrets | Path | None = None) -> Site:
    """The site of one inventory (name or path), or of several sources merged as
    ansible-playbook merges several -i, checked by every rule (SITE_RULES). `vault`: the
    run's secrets (a Path: one --vault-password-file). Raises InventoryError."""
    return load_site(inventory, vault, rules=SITE_RULES)
