"""`deploykit verify --roundtrip`: LMCache's real remote store path (its S3 connector, or in
`nixl` mode its NIXL storage backend with NIXL's OBJ plugin) stores chunks from one serving
host and reads them back from another, through the deployed settings, profile and
PYTHONHASHSEED; a second read with another seed must miss.

The driver runs on each serving host, in its vllm_venv, through Ansible with the
inventory's own connection settings. A plugin may run it elsewhere for a host: the lab runs
NIXL round trips (its hosts' venv has no NIXL) on the controller *inside the host's network
namespace* with the host's resolv.conf and a copy of its deployed files.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from urllib.parse import quote

from deploy_kit.config import names
from deploy_kit.config.models import HostConfig
from deploy_kit.config.site import Host, Site
from deploy_kit.core.errors import DeployKitError
from deploy_kit.plan.serving import serving_host
from deploy_kit.project import DRIVERS, driver_path
from deploy_kit.render import tls
from deploy_kit.render.lmcache import render_lmcache_yaml
from deploy_kit.transport.hosts import run_on, sections
from deploy_kit.verify.model import Finding, Status

TOKENS = 512  # two 256-token chunks
# what a driver's output says, and what it means for the operator
DRIVER_FAILURES = (
    ("No module named 'nixl'", "NIXL is not installed in the host's venv (lmcache_mode nixl "
                               "installs lmcache[nixl] and the pinned nixl)"),
    ("NIXL_ERR_NOT_FOUND", "NIXL could not create its OBJ backend: the plugin did not load "
                           "(nixl-cu13 1.5.x needs libcuobjclient.so.1; pin nixl 1.4.1)"),
)


class RoundTripError(DeployKitError):
    pass


@dataclass
class HostFiles:
    env: dict[str, str]
    files: dict[str, str]  # deployed path -> content
    resolv: str
    ca_bundle: str = ""  # the host's system CA bundle (deploykit_s3_tls): what awscrt trusts
    # an LMCache config rendered from the host's settings, which the host itself does not
    # have (server topology, or a store it does not run): shipped with the driver
    rendered_config: str | None = None


def _read(site: Site, host: Host, render: bool = False) -> HostFiles:
    """The host's deployed files; with `render`, its LMCache config is rendered from its
    settings instead (server topology, or a store the host does not run yet)."""
    c = host.config
    serving = serving_host(host)
    paths = [names.lmcache_config_path(c), names.credentials_path(c), names.aws_config_path(c)]
    # server topology: no lmcache.yaml on the host; its LMCache server's env holds the profile
    env_paths = serving.lmcache_env_paths
    extra = [tls.SYSTEM_BUNDLE] if c.deploykit_s3_tls else []
    script = "; ".join(f"echo '### {p}'; cat {shlex.quote(p)}" for p in
                       [*env_paths, *paths, "/etc/resolv.conf", *extra])
    found = sections(run_on(site, host, script, check=False))  # missing files: empty
    env = dict(line.split("=", 1) for path in reversed(env_paths)
               for line in found.get(path, "").splitlines()
               if "=" in line and not line.startswith("#"))
    files = {p: found.get(p, "") for p in paths}
    rendered = None
    if serving.has_server or render:
        # the in-process connector is what the driver runs: give it the settings this host's
        # settings render (the same bucket, name, region and TLS as its server's L2)
        rendered = files[names.lmcache_config_path(c)] = render_lmcache_yaml(c, host.geometry)
        env.setdefault("LMCACHE_CONFIG_FILE", names.lmcache_config_path(c))
    return HostFiles(env=env, files=files, resolv=found.get("/etc/resolv.conf", ""),
                     ca_bundle=found.get(tls.SYSTEM_BUNDLE, "") if extra else "",
                     rendered_config=rendered)


# A local way to run the driver for a host (the lab: inside the host's network namespace),
# or None to run it on the host over SSH. Passed in so this module never imports the lab.
LocalDriver = Callable[[Host, HostFiles, dict[str, str], str, list[str]], str | None]


def _run_driver(site: Site, host: Host, deployed: HostFiles, mode: str, seed: str | None,
                local: LocalDriver | None) -> dict[str, object]:
    if host.geometry is None or host.geometry.mla:
        raise RoundTripError(f"{host.name}: the round trip needs a standard-attention model")
    g = host.geometry
    # the name vLLM gives LMCache on the host (the staged path for a local model), so the
    # driver's keys are the ones the serving host writes
    args = [mode, host.config.model_path_on_host, str(g.num_layers), str(g.num_kv_heads),
            str(g.head_dim), str(TOKENS)]
    env = dict(deployed.env)
    if seed is not None:
        env["PYTHONHASHSEED"] = seed
    driver = driver_path(host.config.lmcache_mode).read_text()
    output = local(host, deployed, env, driver, args) if local else None
    if output is None:
        # a failing driver's output (2>&1) is what names the cause: read it whatever the exit
        output = run_on(site, host, remote_script(host, deployed, env, driver, args),
                        timeout=600, check=False)
    lines = [ln for ln in output.splitlines() if ln.startswith("{")]
    if not lines:
        known = next((why for text, why in DRIVER_FAILURES if text in output), None)
        raise RoundTripError(f"{host.name}: the LMCache driver printed no result"
                             + (f": {known}" if known else ""), hint=output[-500:])
    result: dict[str, object] = json.loads(lines[-1])
    return result


def remote_script(host: Host, deployed: HostFiles, env: dict[str, str], driver: str,
                  args: list[str]) -> str:
    """The driver on the host, in its vllm_venv, from a private temporary directory; a
    rendered LMCache config travels with it. stderr joins stdout: a failing import is
    what names the cause."""
    exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items()
                       if not (deployed.rendered_config and k == "LMCACHE_CONFIG_FILE"))
    config = ""
    if deployed.rendered_config is not None:
        config = f"cat > \"$d/lmcache.yaml\" <<'DKEOF'\n{deployed.rendered_config}\nDKEOF\n"
        exports += ' LMCACHE_CONFIG_FILE="$d/lmcache.yaml"'
    python = f"{shlex.quote(host.config.vllm_venv)}/bin/python"
    return (f"d=$(mktemp -d) || exit 1\ntrap 'rm -rf \"$d\"' EXIT\n"
            f"cat > \"$d/driver.py\" <<'DKEOF'\n{driver}\nDKEOF\n{config}"
            f"env {exports} {python} \"$d/driver.py\" {shlex.join(args)} 2>&1\n")


def nixl_object_name(key: str) -> str:
    """The object NIXL's dynamic mode stores a chunk under: '/' and '@' become '_', then
    percent-encoding (lmcache 0.5.6 nixl_storage_backend.py _format_object_key_url_safe)."""
    return quote(key.replace("/", "_").replace("@", "_"), safe="")


def _names_finding(host: Host, result: Mapping[str, object]) -> Finding:
    keys = [str(k) for k in result.get("keys", [])]  # type: ignore[attr-defined]
    prefix = host.config.model_path_on_host + "@1@0@"
    well_formed = bool(keys) and all(k.startswith(prefix) and k.endswith("@bfloat16")
                                     for k in keys)
    if host.config.lmcache_mode == "nixl":
        objects = [str(o) for o in result.get("objects", [])]  # type: ignore[attr-defined]
        if well_formed and objects == [nixl_object_name(k) for k in keys]:
            return Finding("lmcache-object-names", Status.PASS, host.name,
                           f"NIXL objects named {objects[0]}")
        return Finding("lmcache-object-names", Status.FAIL, host.name,
                       f"unexpected keys {keys[:1]} / objects {objects[:1]}",
                       "expected <model>_1_0_<hash>_<dtype> (LMCache's key, '/' and '@' as _)")
    if well_formed:
        return Finding("lmcache-object-names", Status.PASS, host.name,
                       f"objects named {keys[0].replace('/', '_')}")  # S3 object: / as _
    return Finding("lmcache-object-names", Status.FAIL, host.name,
                   f"unexpected object names {keys[:2]}",
                   "expected <model>@<tp*pp>@<rank>@<hash>@<dtype>")


def _path(c: HostConfig) -> str:
    if c.lmcache_mode == "nixl":
        return f"NIXL {c.lmcache_nixl_backend} at {names.endpoint_url(c)}/{c.cache_bucket}"
    return f"{c.cache_bucket}.{c.deploykit_s3_fqdn}"


def _as_store(host: Host, store: str | None) -> Host:
    if store is None or store == host.config.lmcache_mode:
        return host
    return replace(host, config=host.config.model_copy(update={"lmcache_mode": store}))


def roundtrip(site: Site, local: LocalDriver | None = None,
              store: str | None = None) -> list[Finding]:
    """`store` (s3 or nixl) tries that store with each host's settings instead of the one
    it runs: e.g. NIXL's OBJ path against the same RGW before a fleet switches to it."""
    if store is not None and store not in DRIVERS:
        raise RoundTripError(f"no round trip for store {store!r}", hint="use s3 or nixl")
    serving = [_as_store(h, store) for h in site.group("vllm")]
    serving = [h for h in serving if h.config.lmcache_mode in DRIVERS]
    if len(serving) < 2:
        return [Finding("lmcache-roundtrip", Status.SKIP, "vllm",
                        "needs two serving hosts with a remote store (lmcache_mode s3 or nixl)")]
    a = serving[0]
    # both ends must speak the same store: a nixl host cannot read what an S3 host wrote
    b = next((h for h in serving[1:] if h.config.lmcache_mode == a.config.lmcache_mode), None)
    if b is None:
        return [Finding("lmcache-roundtrip", Status.SKIP, "vllm",
                        f"no second serving host in lmcache_mode {a.config.lmcache_mode}")]
    forced = store is not None
    files_a, files_b = _read(site, a, forced), _read(site, b, forced)  # one read per host
    stored = _run_driver(site, a, files_a, "store", None, local)
    fetched = _run_driver(site, b, files_b, "fetch", None, local)
    seed = b.config.vllm_python_hash_seed
    other = _run_driver(site, b, files_b, "fetch", str(seed + 1), local)
    keys = [str(k) for k in stored.get("keys", [])]  # type: ignore[attr-defined]
    findings = []
    identical = fetched.get("identical", [])
    hits = int(str(fetched.get("hits", 0)))
    written = sum(bool(w) for w in stored.get("exists", []))  # type: ignore[attr-defined]
    if hits == len(keys) and keys and all(identical):  # type: ignore[arg-type]
        findings.append(Finding(
            "lmcache-roundtrip", Status.PASS, f"{a.name} → {b.name}",
            f"{a.name} stored {len(keys)} chunks of {stored.get('chunk_bytes')} B through "
            f"{_path(a.config)}; {b.name} hit {hits}/{len(keys)}, byte-identical"))
    else:
        findings.append(Finding(
            "lmcache-roundtrip", Status.FAIL, f"{a.name} → {b.name}",
            f"{a.name} stored {written}/{len(keys)} (LMCache only logs a failed put); "
            f"{b.name} hit {hits}/{len(keys)}, "
            f"identical {identical}",
            "run `deploykit verify` for the cause (seed, credentials, DNS, region, TLS trust)"))
    findings.append(_names_finding(a, stored))
    missed = int(str(other.get("hits", 0))) == 0
    findings.append(Finding(
        "lmcache-seed-mismatch", Status.PASS if missed else Status.FAIL, b.name,
        f"with PYTHONHASHSEED={seed + 1} (fleet: {seed}) {b.name} computes other keys and "
        f"misses ({other.get('hits')}/{len(keys)} hits): every host must share one seed"
        if missed else f"PYTHONHASHSEED={seed + 1} still hit: keys do not depend on the seed"))
    return findings
