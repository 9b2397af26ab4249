"""Pass-through knobs must not override what deploykit renders (corpus class 5).

`vllm_extra_args` (appended to vLLM's argv, where the last flag wins), `vllm_extra_env`
(over deploykit's env), `vllm_kv_transfer_extra` (merged into --kv-transfer-config) and
`lmcache_extra_config` (merged into lmcache.yaml's extra_config) reach the hosts without any
of deploykit's checks: a `--port`, `PYTHONHASHSEED` or `chunk_size` there would bypass every
per-host and cross-host rule. What deploykit owns is not a hand list: it is what the
renderers emit for the host, with each of the host's settings changed in turn (so flags
rendered only when a setting is on are owned too), each key mapped to the setting whose
change made it appear or change. Genuinely extra keys stay accepted.

The two site rules here need the renderers, so they live in the render layer; ops/site.py
adds RULES to config's rules in SITE_RULES, the list every command validates a site with.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Iterator
from functools import cache
from typing import Any

from pydantic import ValidationError

from deploy_kit.config.instances import DEVICE_ENV
from deploy_kit.config.models import SECRET_KEYS, HostConfig
from deploy_kit.config.rulebook import DATA_PARALLEL as _DATA_PARALLEL
from deploy_kit.config.rulebook import SECRET_NAME as _SECRET_NAME
from deploy_kit.config.rulebook import collector
from deploy_kit.config.rulebook import src as _src
from deploy_kit.config.rulebook import weight as _weight
from deploy_kit.config.site import Host, Site
from deploy_kit.core.errors import Problem
from deploy_kit.core.geometry import ModelGeometry
from deploy_kit.render.lmcache import NIXL_PARAMS

RULES, rule = collector()

KNOBS = {"vllm_extra_args", "vllm_extra_env", "vllm_kv_transfer_extra", "lmcache_extra_config",
         "lmcache_top_level_config"}
# vLLM's short aliases (vllm/engine/arg_utils.py) and the env variables that stand for a flag
_SHORT = {"-tp": "--tensor-parallel-size", "-pp": "--pipeline-parallel-size"}
_ENV_FLAG = {"VLLM_API_KEY": "--api-key"}
# reported by other rules (one line per problem): devices (instances_fit_devices), TLS
# (tls_consistent), chunk metadata (lmcache_extra_config_valid), the chunk-key hash
# (lmcache_extra_config_valid's _chunk_hash_problems)
_ELSEWHERE = {*DEVICE_ENV.values(), "disable_tls", "save_chunk_meta",
              "pre_caching_hash_algorithm"}
DEPLOYKIT = "deploykit"  # rendered whatever the settings say


@dataclasses.dataclass(frozen=True, eq=False)  # hashed by identity: one per class
class Owned:
    flags: dict[str, str]  # --long-flag -> setting
    switches: frozenset[str]  # flags rendered without a value (on/off switches)
    env: dict[str, str]
    kv: dict[str, str]  # kv-transfer-config keys (kv_connector_extra_config.x for sub-keys)
    lmcache: dict[str, str]  # lmcache.yaml keys, extra_config keys and L2 adapter fields


def _argv(words: list[str]) -> tuple[dict[str, str], set[str]]:
    """{flag: value} and the switches of a rendered argv; the model positional is --model."""
    flags: dict[str, str] = {}
    switches: set[str] = set()
    if words[1:2] == ["serve"]:  # `vllm serve MODEL`
        flags["--model"] = words[2]
    i = 3 if words[1:2] in (["serve"], ["-m"]) else 1  # or `python -m module`
    while i < len(words):
        word = words[i]
        nxt = words[i + 1] if i + 1 < len(words) else None
        if word.startswith("-") and (nxt is None or nxt.startswith("--")):
            flags[word], i = "", i + 1
            switches.add(word)
        elif word.startswith("-"):
            flags[word], i = nxt or "", i + 2
        else:
            i += 1
    return flags, switches


def _flatten(data: dict[str, Any], prefix: str = "") -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in data.items():
        if isinstance(value, dict) and key in ("extra_config", "kv_connector_extra_config",
                                               NIXL_PARAMS):
            # NIXL's params are merged key by key (render/lmcache.merge_extra): each is owned
            out |= _flatten(value, "" if key == "extra_config" else f"{key}.")
        else:
            out[f"{prefix}{key}"] = repr(value)
    return out


def _render(c: HostConfig, geometry: ModelGeometry | None) -> dict[str, dict[str, str]]:
    from deploy_kit.render import lmcache_server
    from deploy_kit.render.lmcache import build_lmcache_config
    from deploy_kit.render.vllm import kv_transfer_config, vllm_argv, vllm_env

    host = Host("probe", "10.0.0.1", frozenset({"vllm"}), c, {}, geometry)
    flags, switches = _argv(vllm_argv(host))
    env = vllm_env(host) | lmcache_server.server_env(c) | {"VLLM_API_KEY": "<secret>"}
    lmcache = _flatten(build_lmcache_config(c, geometry)) | \
        _flatten(lmcache_server.l2_adapter(c) or {})
    server, _ = _argv(lmcache_server.server_argv(c))  # --chunk-size: chunk_size
    lmcache |= {f[2:].replace("-", "_"): v for f, v in server.items() if f != "--model"}
    return {"flags": flags, "switches": dict.fromkeys(switches, ""), "env": env,
            "kv": _flatten(kv_transfer_config(host)), "lmcache": lmcache}


def _alternatives(name: str, default: Any, annotation: Any) -> list[Any]:
    """Values to try for one setting: each that validates shows what the setting renders."""
    options = [a for a in typing.get_args(annotation) if a is not type(None)]
    literals = [v for a in [annotation, *options] if typing.get_origin(a) is typing.Literal
                for v in typing.get_args(a)]
    if literals:
        return [v for v in literals if v != default]
    if isinstance(default, bool):
        return [not default]
    if isinstance(default, (int, float)):
        return [default + 1, default - 1, default / 2]
    if isinstance(default, str):
        return [default + "x", "/x", "x"]
    if default is None:
        return [2, 0.5, 4096, "x", True, False, {"rope_type": "yarn", "factor": 2.0}]
    return []


# the settings that decide which keys the renderers emit at all; a probe per combination
CLASS_FIELDS = ("vllm_version", "lmcache_version", "vllm_accelerator", "lmcache_topology",
                "lmcache_mode", "lmcache_nixl_buffer_device", "deploykit_s3_tls")
_EMPTY_KNOBS: dict[str, Any] = {"vllm_extra_args": [], "vllm_extra_env": {},
                                "vllm_kv_transfer_extra": {}, "lmcache_extra_config": {},
                                "lmcache_top_level_config": {}}


@cache
def _owned_class(values: tuple[Any, ...]) -> dict[str, dict[str, str]]:
    """key -> setting for one combination of CLASS_FIELDS: each other setting changed in
    turn shows which keys it renders (once per combination, about a second)."""
    probe = dict(zip(CLASS_FIELDS, values, strict=True))
    c = HostConfig.model_validate(probe)
    base = _render(c, None)
    owners: dict[str, dict[str, str]] = {kind: {} for kind in base}
    for kind, keys in base.items():  # rendered whatever the other settings say
        owners[kind] = dict.fromkeys(keys, DEPLOYKIT)
    for name, field in HostConfig.model_fields.items():
        if name in KNOBS or name in SECRET_KEYS or name in CLASS_FIELDS:
            continue
        for alt in _alternatives(name, getattr(c, name), field.annotation):
            try:
                seen = _render(HostConfig.model_validate(probe | {name: alt}), None)
            except (ValidationError, ValueError, KeyError, TypeError, ArithmeticError):
                continue
            for kind, keys in seen.items():
                for key, value in keys.items():
                    if base[kind].get(key) != value:
                        held = owners[kind].get(key)
                        owners[kind][key] = _named(key, None if held == DEPLOYKIT else held,
                                                   name)
    return owners


def _named(key: str, held: str | None, name: str) -> str:
    """The setting a key is reported with: the one named like it (--served-model-name:
    vllm_served_model_name, not vllm_model), else the first found; several: '/'-joined."""
    stem = key.lstrip("-").split(".")[-1].replace("-", "_").lower()
    if held is None or (key.startswith("-") and name.startswith("vllm_")
                        and not held.startswith("vllm_")):
        return name  # a vLLM flag: its vllm_* setting first
    if name.endswith(stem) and not held.endswith(stem):
        return name
    if held.endswith(stem) or held.count("/") >= 2 or name in held.split("/"):
        return held
    return f"{held}/{name}"


def owned_for(host: Host) -> Owned:
    """What deploykit renders for any host of this one's class (its settings, each changed
    in turn), each key with the setting behind it: one computation per class, not per host."""
    return _owned_table(tuple(getattr(host.config, f) for f in CLASS_FIELDS))


@cache
def _owned_table(values: tuple[Any, ...]) -> Owned:
    table = {kind: dict(keys) for kind, keys in _owned_class(values).items()}
    table["env"]["VLLM_API_KEY"] = "vllm_api_key"  # the 0600 secret env file's
    # rendered only with a chunk geometry, which the probes lack: named here
    table["lmcache"].setdefault("min_retrieve_tokens", "lmcache_min_retrieve_tokens")
    if table["lmcache"].keys() & {f"{NIXL_PARAMS}.endpoint_override"}:
        table["lmcache"] |= {f"{NIXL_PARAMS}.crtMinLimit": "lmcache_nixl_crt_min_limit",
                             f"{NIXL_PARAMS}.throughput_target_gbps": "deploykit_storage_gbps"}
    flags = table["flags"] | {flag: table["env"][env] for env, flag in _ENV_FLAG.items()}
    env = table["env"] | {f"LMCACHE_{k.upper()}": s for k, s in table["lmcache"].items()}
    return Owned(flags, frozenset(table["switches"]), env, table["kv"], table["lmcache"])


def _rendered_env(host: Host) -> set[str]:
    """The variables rendered for this very host (HF_HUB_OFFLINE only with a local model:
    for a hub model it is the operator's to set), with LMCache's LMCACHE_<KEY> overrides."""
    from deploy_kit.render.vllm import vllm_env

    c = host.config.model_copy(update=_EMPTY_KNOBS)
    probe = Host(host.name, host.address, host.groups, c, {}, host.geometry)
    return set(vllm_env(probe)) | {"VLLM_API_KEY"}


def _flag_name(word: str) -> tuple[str, str | None]:
    """(the long flag a word sets, its inline value): `--max_model_len=5` is
    --max-model-len (vLLM turns `_` into `-`), `--kv-transfer-config.kv_role x` is
    --kv-transfer-config (its JSON sub-key form), `-tp2` is --tensor-parallel-size."""
    name, eq, value = word.partition("=")
    for short, long in _SHORT.items():
        if name == short or (name.startswith(short) and name[len(short):].isdigit()):
            return long, value if eq else (name[len(short):] or None)
    if not name.startswith("--"):
        return name, value if eq else None
    base = name[2:].split(".", 1)[0].replace("_", "-")
    return f"--{base}", value if eq else None


def _match(flag: str, owned: Owned) -> str | None:
    """The owned flag `flag` sets: itself, its --no- form, or (argparse's allow_abbrev, on in
    vLLM's FlexibleArgumentParser) an owned flag it is a prefix of."""
    for candidate in (flag, flag.replace("--no-", "--", 1)):
        if candidate in owned.flags:
            return candidate
    if len(flag) > 4:
        prefixed = sorted(f for f in owned.flags if f.startswith(flag))
        if prefixed:
            return prefixed[0]
    return None


def _fix(setting: str, what: str) -> str:
    if setting == DEPLOYKIT:
        return f"remove it: deploykit sets {what} itself"
    settings = setting.replace("/", " or ")
    return f"remove it and set {settings} (deploykit renders {what} from it)"


# LMCache loads its whole configuration from this file when it is set
CONFIG_FILE_ENV = "LMCACHE_CONFIG_FILE"


@rule
def knobs_do_not_override(site: Site) -> Iterator[Problem]:
    """An owned flag, variable or key inside a pass-through knob is refused, naming the
    setting that renders it."""
    for host in site.group("vllm"):
        c = host.config
        if c.vllm_accelerator is None or not (c.vllm_extra_args or c.vllm_extra_env or
                                              c.vllm_kv_transfer_extra or
                                              c.lmcache_extra_config or
                                              c.lmcache_top_level_config):
            continue
        try:
            owned = owned_for(host)
        except (ValueError, KeyError, TypeError, ArithmeticError, AttributeError):
            continue  # an unsupported version or build: versions_supported says so
        yield from _args(site, host, owned)
        for knob, table in (("vllm_extra_env", owned.env), ("vllm_kv_transfer_extra", owned.kv),
                            ("lmcache_extra_config", owned.lmcache),
                            ("lmcache_top_level_config", owned.lmcache)):
            value = getattr(c, knob)
            keys = [*value, *(f"kv_connector_extra_config.{k}" for k in
                              value.get("kv_connector_extra_config") or {}
                              if knob == "vllm_kv_transfer_extra"),
                    *(f"{NIXL_PARAMS}.{k}" for k in _mapping(value.get(NIXL_PARAMS))
                      if knob == "lmcache_extra_config")]
            if knob == "lmcache_extra_config" and isinstance(value.get(NIXL_PARAMS), dict):
                keys.remove(NIXL_PARAMS)  # merged, not replaced: its keys are checked
            for key in keys:
                if knob == "vllm_extra_env" and key == CONFIG_FILE_ENV and key not in table:
                    # like `--config FILE`: every LMCache key, from a file never checked
                    # (read by the vLLM side in every topology, the server's included)
                    yield Problem(_src(site, host, knob), f"{knob}.{key}",
                                  "sets LMCache options from a file deploykit never checks, "
                                  "overriding the ones it renders",
                                  "remove it: give the options as settings or "
                                  "lmcache_extra_config", hosts=(host.name,))
                    continue
                if key in table and key.split(".")[-1] not in _ELSEWHERE and \
                        not _SECRET_NAME.search(key) and \
                        (knob != "vllm_extra_env" or key.startswith("LMCACHE_") or
                         key in _rendered_env(host)):
                    yield Problem(_src(site, host, knob), f"{knob}.{key}",
                                  "overrides what deploykit renders there",
                                  _fix(table[key], key), hosts=(host.name,))


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


@cache
def _arg_findings(words: tuple[str, ...], owned: Owned) -> tuple[tuple[str, str, str], ...]:
    """(value, message, fix) for each word that overrides an owned flag: computed once per
    distinct list (hosts share their group's), not per host."""
    found: list[tuple[str, str, str]] = []
    for i, word in enumerate(words):
        if not word.startswith("-") or _DATA_PARALLEL.match(word):
            continue
        flag, value = _flag_name(word)
        if flag == "--config":  # a YAML of any vLLM option, read on the host
            found.append(("", f"{word.split('=')[0]} sets vLLM options from a file deploykit "
                          "never checks", "give the options as settings or extra args"))
            continue
        match = _match(flag, owned)
        if match is None:
            continue
        if value is None and i + 1 < len(words) and not words[i + 1].startswith("--"):
            value = words[i + 1]
        if match in owned.switches and value is None and flag == match:
            continue  # turning on a switch deploykit renders only when its setting is on
        found.append((value or "", f"{word.split('=')[0]} overrides deploykit's {match}",
                      _fix(owned.flags[match], match)))
    return tuple(found)


def _args(site: Site, host: Host, owned: Owned) -> Iterator[Problem]:
    c = host.config
    found = _arg_findings(tuple(c.vllm_extra_args), owned)
    if not found:
        return
    secrets = {v.get_secret_value() for k in SECRET_KEYS
               if (v := getattr(c, k, None)) is not None}
    for value, message, fix in found:
        if value and value in secrets:
            continue  # no_secrets_in_plain_files names the copied secret
        yield Problem(_src(site, host, "vllm_extra_args"), "vllm_extra_args", message, fix,
                      hosts=(host.name,))


# vLLM flags deploykit does not render but that change what a prefix's KV is (weights,
# tokens, sampling state): reaching the hosts through vllm_extra_args, they must still be one
# value on every host that shares the bucket (absent counts as a value)
IDENTITY_FLAGS = ("--revision", "--code-revision", "--tokenizer", "--tokenizer-revision",
                  "--tokenizer-mode", "--quantization", "--load-format", "--trust-remote-code",
                  "--seed")
_IDENTITY_SHORT = {"-q": "--quantization"}


def identity_flags(words: list[str]) -> dict[str, str]:
    """The identity flags an extra argv sets, in any spelling, with their values."""
    found: dict[str, str] = {}
    for i, word in enumerate(words):
        if not word.startswith("-"):
            continue
        flag, value = _flag_name(word)
        flag = _IDENTITY_SHORT.get(flag, flag)
        if flag not in IDENTITY_FLAGS and len(flag) > 4:
            flag = next((f for f in IDENTITY_FLAGS if f.startswith(flag)), flag)
        if flag in IDENTITY_FLAGS:
            if value is None and i + 1 < len(words) and not words[i + 1].startswith("-"):
                value = words[i + 1]
            found[flag] = value or ""
    return found


@rule
def passthrough_identity_agrees(site: Site) -> Iterator[Problem]:
    """`--revision`, `--seed`, `--quantization`... in vllm_extra_args: one value fleet-wide."""
    hosts = site.group("vllm")
    if len(hosts) < 2 or not any(h.config.vllm_extra_args for h in hosts):
        return
    parsed: dict[tuple[str, ...], dict[str, str]] = {}  # hosts share their group's list
    seen: dict[str, dict[str, str]] = {}
    for host in hosts:
        words = tuple(host.config.vllm_extra_args)
        if words not in parsed:
            parsed[words] = identity_flags(list(words))
        seen[host.name] = parsed[words]
    for flag in IDENTITY_FLAGS:
        values: dict[str | None, list[Host]] = {}
        for host in hosts:
            values.setdefault(seen[host.name].get(flag), []).append(host)
        if len(values) < 2:
            continue
        majority = max(values, key=lambda v: _weight(site, values[v], "vllm_extra_args"))
        for value, members in values.items():
            if value == majority:
                continue
            shown = "unset" if value is None else repr(value)
            others = "unset" if majority is None else repr(majority)
            for host in members:
                yield Problem(_src(site, host, "vllm_extra_args"), f"vllm_extra_args {flag}",
                              f"{host.name} has {shown}, others have {others}",
                              "use one value on every vllm host (the cache keys would not "
                              "tell their KV apart)", hosts=(host.name,))
