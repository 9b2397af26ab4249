"""The lab's profiles: what `deploykit lab up --profile NAME` writes into inventory/lab/ from
the start, so every converge of a lab session runs with the settings it was made for (no
profile switched on half-way through a session).

- serving (the default, `make lab`): lab3/lab4 run vLLM (CPU) + an LMCache server for real,
  two vLLM instances on lab3 sharing its LMCache server (vllm_instances: 2), one on lab4.
- plain: the storage and DNS tier only; the serving hosts get units and config, nothing runs.
- secured: serving, plus TLS on the concentrators (port 443, the site CA made by `up`),
  Consul ACLs (default deny) and gossip encryption, the tokens and key in a vault file.
- monitoring: serving, plus a `monitoring` group on lab1 (Prometheus, the blackbox
  exporter, a node exporter on each serving host) scraping every job every 5 s.
"""

from __future__ import annotations

import base64
import os
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from deploykit_lab.layout import LAB_DIR


@dataclass(frozen=True)
class Profile:
    name: str
    serving: bool
    secured: bool
    summary: str
    monitoring: bool = False
    # vLLM instances on the first serving host (lab3), sharing its LMCache server; the
    # other serving host runs one
    instances: int = 1


PROFILES = {p.name: p for p in (
    Profile("serving", True, False, "vLLM (CPU) + LMCache server on lab3/lab4, plain HTTP; "
            "two vLLM instances on lab3", instances=2),
    Profile("plain", False, False, "storage + DNS only; serving hosts get config, no vLLM"),
    Profile("secured", True, True, "serving + TLS (443) + Consul ACLs + gossip encryption"),
    Profile("monitoring", True, False, "serving + Prometheus on lab1 scraping every job",
            monitoring=True),
)}
DEFAULT = "serving"

VAULT_PASSWORD = LAB_DIR / "vault-password"
VAULT_FILE = LAB_DIR / "vault.yml"  # encrypted; copied into inventory/lab on every lab up
SECRET_NAMES = ("consul_acl_management_token", "consul_acl_agent_token",
                "consul_acl_service_token", "consul_acl_dns_token")


def profile(name: str) -> Profile:
    return PROFILES[name]


def _private(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    path.chmod(0o600)


def vault_text() -> str:
    """The secured profile's vault: made once per lab (a rewritten inventory of a running
    lab must keep the tokens Consul already knows), encrypted with the lab's password."""
    from ansible.parsing.vault import VaultLib, VaultSecret

    if VAULT_FILE.exists() and VAULT_PASSWORD.exists():
        return VAULT_FILE.read_text()
    _private(VAULT_PASSWORD, base64.b64encode(os.urandom(24)).decode() + "\n")
    secrets = {name: str(uuid.uuid4()) for name in SECRET_NAMES}
    secrets["consul_gossip_key"] = base64.b64encode(os.urandom(32)).decode()
    secret = VaultSecret(VAULT_PASSWORD.read_text().strip().encode())
    text: str = VaultLib([("default", secret)]).encrypt(yaml.safe_dump(secrets)).decode()
    _private(VAULT_FILE, text)
    return text


def group_vars(chosen: Profile) -> dict[str, dict[str, Any] | str]:
    """group_vars/all/<file> -> settings (or encrypted text) the profile adds."""
    if chosen.monitoring:
        return {"monitoring.yml": {
            "monitoring_scrape_interval": "5s",
            # the lab has no ACLs: Consul's API opens so that its metrics are scraped too
            "consul_http_address": "0.0.0.0"}}
    if not chosen.secured:
        return {}
    return {"tls.yml": {"deploykit_s3_tls": True, "deploykit_s3_port": 443},
            "consul-secure.yml": {"consul_acl_enabled": True, "consul_gossip_encryption": True,
                                  # opened on purpose: the ACLs are what this profile proves
                                  "consul_http_address": "0.0.0.0"},
            "vault.yml": vault_text()}
