"""The secrets a site's secure defaults need, and the form a generated one takes (pure).

A secret the inventory or vault sets always wins. One it leaves unset on a host that needs it
is a gap: `deploykit up` fills it from the controller's store (deploy_kit/ops/secrets_store.py),
generating it there on first use, as kolla-genpwd does. Nothing here reads or writes a file.
"""

from __future__ import annotations

import base64
import dataclasses
import re
import secrets
import uuid
from collections.abc import Callable, Mapping

from pydantic import SecretStr

from deploy_kit.config import names
from deploy_kit.config.site import Host, Site

CONSUL_TOKENS = ("consul_acl_management_token", "consul_acl_agent_token",
                 "consul_acl_service_token", "consul_acl_dns_token")
# Consul wants UUIDs for ACL SecretIDs and 32 random bytes (base64) for the gossip key;
# vLLM compares the bearer token as a string: 32 random bytes, URL-safe. The L2 master key
# is 32 random bytes too, kept as base64 text: the store is a YAML document of strings, and
# the host's key file holds that same text (LMCache reads the file's bytes whole as HKDF
# input, lmcache 0.5.6 v1/distributed/serde/aesgcm.py:162-165, so 44 ASCII characters carry
# the 256 random bits; an Ansible `content:` cannot carry arbitrary raw bytes)
L2_MASTER_KEY = "lmcache_l2_master_key"
L2_MASTER_KEY_BYTES = 32


def _api_key() -> str:
    # never a leading "-": during a rotation vLLM takes both keys as --api-key K1 K2, where
    # argparse would read such a key as an option (roles/serving/tasks/instances.yml)
    while (key := secrets.token_urlsafe(32)).startswith("-"):
        pass
    return key


GENERATORS: dict[str, Callable[[], str]] = {
    "vllm_api_key": _api_key,
    **{name: lambda: str(uuid.uuid4()) for name in CONSUL_TOKENS},
    "consul_gossip_key": lambda: base64.b64encode(secrets.token_bytes(32)).decode(),
    L2_MASTER_KEY: lambda: base64.b64encode(secrets.token_bytes(L2_MASTER_KEY_BYTES)).decode(),
}
GENERATED = tuple(GENERATORS)
# a rotation under way (`deploykit secrets rotate vllm-api-key`): the key clients move to,
# accepted beside the current one until the rotation finishes; kept in the store with it
NEXT = {name: f"{name}_next" for name in ("vllm_api_key", "consul_acl_agent_token",
                                          "consul_acl_service_token", "consul_acl_dns_token",
                                          "consul_gossip_key", L2_MASTER_KEY)}
# what a plain `up` cannot roll out after the first one: Consul keeps the bootstrap
# management token and the gossip keyring it started with, and an agent/service/DNS token
# `up` replaces stays valid in Consul until removed there (`secrets rotate` does both)
NOT_ROTATABLE = {
    "consul_acl_management_token": "Consul keeps the management token of its ACL bootstrap; "
                                   "a new value would lock `up` out of the ACL API",
    "consul_gossip_key": "Consul keeps the keyring it started with; a new key needs "
                         "`consul keyring -install/-use/-remove` on a running cluster",
    **{name: "`up` would add a token for the new value but leave the old one valid in Consul"
       for name in CONSUL_TOKENS[1:]},
}


def generate(name: str) -> str:
    return GENERATORS[name]()


# every name the store may hold: the generated secrets and their next values
STORABLE = frozenset(GENERATED) | frozenset(NEXT.values())
_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_API_KEY = re.compile(r"^[!-~]{16,512}$")  # printable ASCII, no space: one argv word


def value_problem(name: str, value: str) -> str | None:
    """Why `value` cannot be the secret `name` (or its next value), or None: the rules a
    vault value meets (config/rules_secrets.py), in words that never quote the value."""
    base = name.removesuffix("_next")
    if any(ord(c) < 0x20 or ord(c) == 0x7f or c in "\x85\u2028\u2029" for c in value):
        return "holds a control character or line break"
    if base in CONSUL_TOKENS:
        return None if _UUID.match(value) else "is not a UUID (a Consul ACL token)"
    if base in ("consul_gossip_key", L2_MASTER_KEY):
        try:
            ok = len(base64.b64decode(value, validate=True)) == 32
        except ValueError:
            ok = False
        what = "a Consul gossip key" if base == "consul_gossip_key" else "an L2 master key"
        return None if ok else f"is not 32 bytes of base64 ({what})"
    if not _API_KEY.match(value):
        return "is not 16 to 512 printable ASCII characters without spaces (an API key)"
    # vLLM takes both keys of a rotation as `--api-key K1 K2`: a leading "-" is an option
    return "starts with '-'" if value.startswith("-") else None


def _consul_agent(host: Host) -> bool:
    # the hosts with a Consul agent (render/files.py): servers, the RGW hosts, the routers
    return host.config.deploykit_dns_mode == "consul" and \
        bool(host.groups & names.CONSUL_AGENT_GROUPS)


def needs(host: Host, name: str) -> bool:
    """Whether `host`'s effective settings use secret `name`."""
    c = host.config
    if name == "vllm_api_key":  # a router's front checks it and the router sends it
        return bool(host.groups & {"vllm", "router"}) and c.vllm_api_key_required
    if name in CONSUL_TOKENS:
        return _consul_agent(host) and c.consul_acl_enabled
    if name == "consul_gossip_key":
        return _consul_agent(host) and c.consul_gossip_encryption
    if name == L2_MASTER_KEY:  # the LMCache server of an encrypting serving host reads it
        return "vllm" in host.groups and c.lmcache_l2_encryption
    raise KeyError(name)


def is_set(host: Host, name: str) -> bool:
    """The inventory or vault gives `name` to `host` (a locked vault value counts: its
    source is known, its value is Ansible's to read)."""
    return getattr(host.config, name) is not None or name in host.sources


def used(site: Site) -> list[str]:
    """Every generatable secret some host of the site uses (set or not)."""
    return [n for n in GENERATED if any(needs(h, n) or (is_set(h, n) and _relevant(h, n))
                                        for h in site.hosts.values())]


def _relevant(host: Host, name: str) -> bool:
    # a vllm_api_key given to a serving or router host is used even with
    # vllm_api_key_required: false
    return name == "vllm_api_key" and bool(host.groups & {"vllm", "router"})


def gaps(site: Site) -> list[str]:
    """The secrets some host needs and its inventory/vault leaves unset: what the store fills."""
    return [n for n in GENERATED
            if any(needs(h, n) and not is_set(h, n) for h in site.hosts.values())]


def hosts_lacking(site: Site, name: str) -> list[str]:
    return sorted(h.name for h in site.hosts.values() if needs(h, name) and not is_set(h, name))


def fill(site: Site, values: Mapping[str, str]) -> Site:
    """`site` with each gap a value in `values` covers: only hosts that need the secret and
    whose inventory leaves it unset get it, so an operator's value is never replaced."""
    hosts = dict(site.hosts)
    for name, host in site.hosts.items():
        update = {key: SecretStr(values[key]) for key in GENERATED
                  if key in values and needs(host, key) and not is_set(host, key)}
        if update:
            hosts[name] = dataclasses.replace(host, config=host.config.model_copy(update=update))
    if hosts == site.hosts:
        return site
    return dataclasses.replace(site, hosts=hosts)
