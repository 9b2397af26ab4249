"""Serving hosts: the LMCache/vLLM config each host really has (read from the host)."""

from __future__ import annotations

import json
from collections.abc import Iterator

from deploy_kit import compat
from deploy_kit.verify.model import Finding, Observation, ServingHost, Status, check

GIB = 1024**3


def _flag(argv: list[str], name: str) -> str | None:
    for i, word in enumerate(argv):
        if word == name and i + 1 < len(argv):
            return argv[i + 1]
        if word.startswith(name + "="):
            return word.split("=", 1)[1]
    return None


def _version(host: ServingHost, obs: Observation, component: str) -> tuple[str, str]:
    """(version, where it came from): installed when the host has it, else the pin."""
    if host.versions.get(component):
        return host.versions[component], "installed"
    return obs.pinned[component], "pinned"


def _hosts(obs: Observation) -> Iterator[ServingHost]:
    for host in obs.serving:
        if host.reachable and host.lmcache_yaml is not None:
            yield host


@check("serving-host-reachable", tags=("vllm",), summary="every serving host answers SSH "
       "and has its LMCache config")
def reachable(obs: Observation) -> Iterator[Finding]:
    for host in obs.serving:
        if not host.reachable:
            yield Finding("serving-host-reachable", Status.FAIL, host.name,
                          f"cannot read the host: {host.error}", "check SSH to the host")
        elif host.lmcache_yaml is None:
            yield Finding("serving-host-reachable", Status.FAIL, host.name,
                          "no LMCache config (LMCACHE_CONFIG_FILE missing)",
                          "rerun `deploykit up` (lmcache role)")
        else:
            yield Finding("serving-host-reachable", Status.PASS, host.name, "config read")


@check("lmcache-chunk-aligned", tags=("lmcache", "vllm", "config"),
       summary="chunk_size is a multiple of the vLLM --block-size")
def chunk_aligned(obs: Observation) -> Iterator[Finding]:
    for host in _hosts(obs):
        chunk = (host.lmcache_yaml or {}).get("chunk_size", 256)
        block = _flag(host.argv, "--block-size")
        if block is None:
            yield Finding("lmcache-chunk-aligned", Status.FAIL, host.name,
                          "vLLM --block-size not pinned (attention backends may raise it)",
                          "set vllm_block_size")
        elif not isinstance(chunk, int) or chunk % int(block):
            yield Finding("lmcache-chunk-aligned", Status.FAIL, host.name,
                          f"chunk_size {chunk} is not a multiple of block size {block}",
                          "cache keys never match: fix lmcache_chunk_size and rerun up")
        else:
            yield Finding("lmcache-chunk-aligned", Status.PASS, host.name,
                          f"chunk {chunk} / block {block}")


def _identity(host: ServingHost) -> dict[str, str]:
    return {"PYTHONHASHSEED": host.env.get("PYTHONHASHSEED", "<unset>"),
            "model": host.argv[2] if len(host.argv) > 2 else "?",
            "TP": _flag(host.argv, "--tensor-parallel-size") or "1",
            "PP": _flag(host.argv, "--pipeline-parallel-size") or "1",
            "kv-cache-dtype": _flag(host.argv, "--kv-cache-dtype") or "auto",
            "chunk_size": str((host.lmcache_yaml or {}).get("chunk_size"))}


@check("lmcache-fleet-consistent", tags=("lmcache", "vllm", "config"),
       summary="hosts sharing the bucket share seed, model, TP, PP, KV dtype and chunk size")
def fleet(obs: Observation) -> Iterator[Finding]:
    hosts = list(_hosts(obs))
    if not hosts:
        return
    identities = {h.name: _identity(h) for h in hosts}
    failures: list[Finding] = []
    for host in hosts:
        if identities[host.name]["PYTHONHASHSEED"] == "<unset>":
            failures.append(Finding("lmcache-fleet-consistent", Status.FAIL, host.name,
                                    "PYTHONHASHSEED unset: cache keys differ in every process",
                                    "set vllm_python_hash_seed (one value fleet-wide)"))
    for key in ("PYTHONHASHSEED", "model", "TP", "PP", "kv-cache-dtype", "chunk_size"):
        values: dict[str, list[str]] = {}
        for name, ident in identities.items():
            values.setdefault(ident[key], []).append(name)
        if len(values) == 1:
            continue
        planned = obs.planned_identity.get(key)
        majority = planned if planned in values else max(values, key=lambda v: len(values[v]))
        for value, names in values.items():
            if value == majority:
                continue
            failures += [Finding("lmcache-fleet-consistent", Status.FAIL, name,
                                 f"{key} {value} differs from the fleet's {majority}",
                                 "zero cross-host hits: use one value on every host")
                         for name in names]
    yield from failures
    if not failures:
        yield Finding("lmcache-fleet-consistent", Status.PASS, "vllm",
                      f"{len(hosts)} hosts share seed, model, TP, PP, KV dtype and chunk")


@check("lmcache-keys-known", tags=("lmcache", "config"), severity="warning",
       summary="every S3 key is one the installed LMCache reads (others are ignored silently)")
def keys_known(obs: Observation) -> Iterator[Finding]:
    for host in _hosts(obs):
        version, source = _version(host, obs, "lmcache")
        try:
            table = compat.lmcache(version)
        except ValueError as exc:
            yield Finding("lmcache-keys-known", Status.FAIL, host.name, str(exc),
                          "use a supported LMCache")
            continue
        extra = (host.lmcache_yaml or {}).get("extra_config") or {}
        dead = sorted(k for k in extra if k in table.s3_dead_keys or
                      (k.startswith("s3_") and k not in table.s3_extra_keys))
        if dead:
            yield Finding("lmcache-keys-known", Status.FAIL, host.name,
                          f"LMCache {version} ({source}) ignores {', '.join(dead)}",
                          "remove them; see deploy_kit/data/compat.yaml")
        else:
            yield Finding("lmcache-keys-known", Status.PASS, host.name,
                          f"keys valid for LMCache {version} ({source})")


@check("lmcache-s3-settings", tags=("lmcache", "s3", "config"),
       summary="s3_region present, TLS matches the endpoint, save_chunk_meta off")
def s3_settings(obs: Observation) -> Iterator[Finding]:
    for host in _hosts(obs):
        cfg = host.lmcache_yaml or {}
        if not str(cfg.get("remote_url", "")).startswith("s3://"):
            continue
        extra = cfg.get("extra_config") or {}
        problems = []
        if not extra.get("s3_region"):
            problems.append("s3_region missing (LMCache turns the remote tier off silently)")
        version, _ = _version(host, obs, "lmcache")
        try:
            tls_default = compat.lmcache(version).s3_tls_default_on
        except ValueError:
            tls_default = True
        if tls_default and not extra.get("disable_tls") and not obs.pinned.get("tls"):
            problems.append("disable_tls not set against a plain-HTTP endpoint "
                            "(every request fails)")
        if obs.pinned.get("tls") and extra.get("disable_tls"):
            problems.append("disable_tls: true against the TLS concentrators "
                            "(deploykit_s3_tls; every request fails)")
        if extra.get("save_chunk_meta"):
            problems.append("save_chunk_meta must be false for S3")
        if problems:
            yield Finding("lmcache-s3-settings", Status.FAIL, host.name, "; ".join(problems),
                          "rerun `deploykit up` to restore the rendered config")
        else:
            yield Finding("lmcache-s3-settings", Status.PASS, host.name,
                          f"region {extra.get('s3_region')}")


@check("lmcache-remote-url", tags=("lmcache", "dns", "config"),
       summary="remote_url is s3://<bucket>.<fqdn> and resolves on the host")
def remote_url(obs: Observation) -> Iterator[Finding]:
    for host in _hosts(obs):
        url = str((host.lmcache_yaml or {}).get("remote_url", ""))
        if not url:
            continue
        hostport = url.removeprefix("s3://")
        name = hostport.split(":")[0]
        expected = f"{obs.bucket}.{obs.fqdn}"
        if name != expected:
            yield Finding("lmcache-remote-url", Status.FAIL, host.name,
                          f"remote_url host {name} (expected {expected})",
                          "LMCache sends everything after s3:// as the Host header")
        elif not host.resolved.get(name):
            yield Finding("lmcache-remote-url", Status.FAIL, host.name,
                          f"{name} does not resolve on the host", "check the resolver role")
        else:
            yield Finding("lmcache-remote-url", Status.PASS, host.name,
                          f"{name} → {len(host.resolved[name])} addresses")


@check("lmcache-memory", tags=("lmcache", "config"),
       summary="pinned DRAM and /dev/shm cover what LMCache allocates")
def memory(obs: Observation) -> Iterator[Finding]:
    for host in _hosts(obs):
        cfg = host.lmcache_yaml or {}
        workers = int(_flag(host.argv, "--tensor-parallel-size") or 1) * \
            int(_flag(host.argv, "--pipeline-parallel-size") or 1)
        pinned = int(workers * float(cfg.get("max_local_cpu_size", 5.0)) * GIB)
        if host.mem_total_bytes is not None and pinned > host.mem_total_bytes * 0.8:
            yield Finding("lmcache-memory", Status.FAIL, host.name,
                          f"LMCache pins {pinned / GIB:.1f} GiB of "
                          f"{host.mem_total_bytes / GIB:.1f} GiB RAM",
                          "lower lmcache_max_local_cpu_size")
        else:
            yield Finding("lmcache-memory", Status.PASS, host.name,
                          f"pinned {pinned / GIB:.1f} GiB")


def rope_override_problems(raw: str | None, table: compat.VLLMCompat, version: str
                           ) -> list[str]:
    """transformers 5 replaces all rope parameters with an override (compat.yaml
    `rope_override`): a `rope_scaling` override, or one without rope_theta, loses rope_theta."""
    if not raw or table.rope_override != "rope_parameters":
        return []
    try:
        overrides = json.loads(raw)
    except ValueError:
        return ["unreadable --hf-overrides"]
    rope = overrides.get("rope_parameters", overrides.get("rope_scaling"))
    if not isinstance(rope, dict):
        return []
    if "rope_scaling" in overrides or "rope_theta" not in rope:
        return [f"--hf-overrides rope without rope_theta: vLLM {version} (transformers 5) "
                "drops the model's rope_theta"]
    return []


@check("vllm-connector-name", tags=("vllm", "config"),
       summary="--kv-transfer-config names the connector exactly and only accepted fields")
def connector(obs: Observation) -> Iterator[Finding]:
    for host in _hosts(obs):
        raw = _flag(host.argv, "--kv-transfer-config")
        version, source = _version(host, obs, "vllm")
        try:
            table = compat.vllm(version)
        except ValueError as exc:
            yield Finding("vllm-connector-name", Status.FAIL, host.name, str(exc), "")
            continue
        try:
            config = json.loads(raw or "")
        except ValueError:
            yield Finding("vllm-connector-name", Status.FAIL, host.name,
                          "no readable --kv-transfer-config", "rerun `deploykit up`")
            continue
        problems = []
        if config.get("kv_connector") not in table.lmcache_connectors:
            problems.append(f"connector {config.get('kv_connector')!r} "
                            "(\"reading choices\" / connector not found)")
        extra = sorted(set(config) - table.kv_transfer_fields)
        if extra:
            problems.append(f"vLLM {version} ({source}) rejects {', '.join(extra)}")
        if table.rope_scaling_flag is None and "--rope-scaling" in host.argv:
            problems.append(f"vLLM {version} has no --rope-scaling (use --hf-overrides)")
        problems += rope_override_problems(_flag(host.argv, "--hf-overrides"), table, version)
        if problems:
            yield Finding("vllm-connector-name", Status.FAIL, host.name, "; ".join(problems),
                          "match the vLLM and LMCache versions; rerun `deploykit up`")
        else:
            yield Finding("vllm-connector-name", Status.PASS, host.name,
                          f"{config['kv_connector']} accepted by vLLM {version} ({source})")


@check("lmcache-telemetry-off", tags=("lmcache", "config"), severity="warning",
       summary="LMCache usage reporting is off")
def telemetry(obs: Observation) -> Iterator[Finding]:
    for host in _hosts(obs):
        if host.env.get("LMCACHE_TRACK_USAGE") == "false" or host.env.get("DO_NOT_TRACK") == "1":
            yield Finding("lmcache-telemetry-off", Status.PASS, host.name, "off")
        else:
            yield Finding("lmcache-telemetry-off", Status.FAIL, host.name,
                          "LMCache reports usage to its vendor",
                          "set LMCACHE_TRACK_USAGE=false (deploykit's env file does)")


@check("vllm-service", tags=("vllm",), summary="/health and /v1/models answer where vLLM runs")
def service(obs: Observation) -> Iterator[Finding]:
    for host in _hosts(obs):
        if not host.service_active:
            yield Finding("vllm-service", Status.SKIP, host.name, "skipped: service not running")
        elif host.health_status == 200 and host.models_status == 200:
            yield Finding("vllm-service", Status.PASS, host.name, "/health and /v1/models 200")
        else:
            yield Finding("vllm-service", Status.FAIL, host.name,
                          f"/health {host.health_status}, /v1/models {host.models_status}",
                          "journalctl -u vllm on the host")


@check("versions-manifest", tags=("config",), severity="warning",
       summary="what runs where: Ceph, LMCache, vLLM, NIXL, driver")
def versions(obs: Observation) -> Iterator[Finding]:
    if obs.ceph_version:
        yield Finding("versions-manifest", Status.INFO, "ceph", obs.ceph_version)
    for host in obs.serving:
        if host.reachable:
            listed = ", ".join(f"{k} {v}" for k, v in sorted(host.versions.items())) or \
                "LMCache/vLLM not installed"
            yield Finding("versions-manifest", Status.INFO, host.name, listed)
