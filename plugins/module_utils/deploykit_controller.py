"""What deploykit's controller-side action plugins share: the inventory sources and vault
secrets of the running ansible-playbook, and the site opened from them in process."""

from __future__ import annotations

from typing import Any


def inventory_sources(args: dict[str, Any], task_vars: dict[str, Any]) -> list[str]:
    """`inventory:` when the task names one (molecule's generated inventory stands for the
    real one), else every -i of this run (ansible_inventory_sources), in order."""
    given = args.get("inventory") or task_vars.get("ansible_inventory_sources") or []
    return [str(s) for s in ([given] if isinstance(given, str) else given)]


def vault_pairs(loader: Any) -> list[tuple[str, Any]]:
    """The (vault id, secret) pairs ansible-playbook was given (--vault-id, -J, password
    files, ANSIBLE_VAULT_IDENTITY_LIST): the play's loader holds them after the CLI read them."""
    vault = getattr(loader, "_vault", None)
    pairs = list(getattr(vault, "secrets", None) or [])
    if not pairs:
        try:  # ansible-core 2.19+: the CLI also publishes them process-wide
            from ansible.parsing.vault import VaultSecretsContext

            pairs = list(VaultSecretsContext.current().secrets)
        except Exception:  # older ansible-core, or no CLI context
            pairs = []
    return pairs


def open_site(args: dict[str, Any], task_vars: dict[str, Any], loader: Any) -> Any:
    """The validated Site of the run's inventory, opened with the run's secrets."""
    from deploy_kit.config.vault import VaultSecrets
    from deploy_kit.ops.site import open_site as open_sources  # every rule (SITE_RULES)

    sources = inventory_sources(args, task_vars)
    return open_sources(sources, VaultSecrets.of_pairs(vault_pairs(loader)))


def failure(exc: Exception) -> dict[str, Any]:
    """deploykit's own error as a task failure: its message (one line per problem)."""
    from deploy_kit.core.errors import DeployKitError

    if isinstance(exc, DeployKitError):
        hint = f" (hint: {exc.hint})" if exc.hint else ""
        return {"failed": True, "msg": exc.message + hint, "exit_code": int(exc.exit_code)}
    return {"failed": True, "msg": f"{exc.__class__.__name__}: {exc}"}
