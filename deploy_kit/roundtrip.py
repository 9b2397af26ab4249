"""`deploykit verify --roundtrip`: LMCache's real S3 connector stores a chunk from one
serving host and reads it back from another, through the deployed remote_url, profile and
PYTHONHASHSEED; a second read with another seed must miss.

Where a serving host has LMCache installed (vllm_venv), the driver runs there over SSH.
On the CPU-only lab, whose hosts carry no LMCache (2 GB of CUDA wheels), it runs on the
controller *inside the host's network namespace* with the host's resolv.conf and a copy of
the host's deployed files: the host's network, DNS, config, credentials and seed.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from dataclasses import dataclass

from deploy_kit.config.site import Host, Site
from deploy_kit.errors import DeployKitError
from deploy_kit.project import project_dir
from deploy_kit.render import lmcache_server, names, tls
from deploy_kit.render.lmcache import render_lmcache_yaml
from deploy_kit.transport.ssh import run_on
from deploy_kit.verify.model import Finding, Status

DRIVER = "tools/lmcache_roundtrip.py"
TOKENS = 512  # two 256-token chunks


class RoundTripError(DeployKitError):
    pass


@dataclass
class HostFiles:
    env: dict[str, str]
    files: dict[str, str]  # deployed path -> content
    resolv: str
    ca_bundle: str = ""  # the host's system CA bundle (deploykit_s3_tls): what awscrt trusts


def _read(host: Host) -> HostFiles:
    c = host.config
    paths = [names.lmcache_config_path(c), names.credentials_path(c), names.aws_config_path(c)]
    # server topology: no lmcache.yaml on the host; its LMCache server's env holds the profile
    env_paths = [names.vllm_env_path(c)] + \
        ([lmcache_server.env_path(c)] if c.lmcache_topology == "server" else [])
    extra = [tls.SYSTEM_BUNDLE] if c.deploykit_s3_tls else []
    script = "; ".join(f"echo '### {p}'; cat {shlex.quote(p)}" for p in
                       [*env_paths, *paths, "/etc/resolv.conf", *extra])
    from deploy_kit.transport.ssh import sections

    found = sections(run_on(host, script))
    env = dict(line.split("=", 1) for path in reversed(env_paths)
               for line in found.get(path, "").splitlines()
               if "=" in line and not line.startswith("#"))
    files = {p: found.get(p, "") for p in paths}
    if c.lmcache_topology == "server":
        # the in-process connector is what the driver runs: give it the S3 settings this
        # host's settings render (the same bucket, name, region and TLS as its server's L2)
        files[names.lmcache_config_path(c)] = render_lmcache_yaml(c)
        env.setdefault("LMCACHE_CONFIG_FILE", names.lmcache_config_path(c))
    return HostFiles(env=env, files=files, resolv=found.get("/etc/resolv.conf", ""),
                     ca_bundle=found.get(tls.SYSTEM_BUNDLE, "") if extra else "")


# A local way to run the driver for a host (the lab: inside the host's network namespace),
# or None to run it on the host over SSH. Passed in so this module never imports the lab.
LocalDriver = Callable[[Host, HostFiles, dict[str, str], str, list[str]], str | None]


def _run_driver(host: Host, deployed: HostFiles, mode: str, seed: str | None,
                local: LocalDriver | None) -> dict[str, object]:
    if host.geometry is None or host.geometry.mla:
        raise RoundTripError(f"{host.name}: the round trip needs a standard-attention model")
    g = host.geometry
    args = [mode, host.config.vllm_model, str(g.num_layers), str(g.num_kv_heads),
            str(g.head_dim), str(TOKENS)]
    env = dict(deployed.env)
    if seed is not None:
        env["PYTHONHASHSEED"] = seed
    driver = (project_dir() / DRIVER).read_text()
    output = local(host, deployed, env, driver, args) if local else None
    if output is None:
        exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
        python = f"{shlex.quote(host.config.vllm_venv)}/bin/python"
        output = run_on(host, f"cat > /tmp/dk-roundtrip.py <<'DKEOF'\n{driver}\nDKEOF\n"
                              f"env {exports} {python} /tmp/dk-roundtrip.py "
                              f"{shlex.join(args)}; rm -f /tmp/dk-roundtrip.py", timeout=600)
    lines = [ln for ln in output.splitlines() if ln.startswith("{")]
    if not lines:
        raise RoundTripError(f"{host.name}: the LMCache driver printed no result",
                             hint=output[-500:])
    result: dict[str, object] = json.loads(lines[-1])
    return result


def roundtrip(site: Site, local: LocalDriver | None = None) -> list[Finding]:
    serving = site.group("vllm")
    if len(serving) < 2:
        return [Finding("lmcache-roundtrip", Status.SKIP, "vllm",
                        "needs two serving hosts")]
    a, b = serving[0], serving[1]
    files_a, files_b = _read(a), _read(b)  # one SSH read per host for all three runs
    stored = _run_driver(a, files_a, "store", None, local)
    fetched = _run_driver(b, files_b, "fetch", None, local)
    seed = b.config.vllm_python_hash_seed
    other = _run_driver(b, files_b, "fetch", str(seed + 1), local)
    keys = [str(k) for k in stored.get("keys", [])]  # type: ignore[attr-defined]
    findings = []
    identical = fetched.get("identical", [])
    hits = int(str(fetched.get("hits", 0)))
    expected_prefix = a.config.vllm_model + "@1@0@"  # the S3 object name has / as _
    if hits == len(keys) and keys and all(identical):  # type: ignore[arg-type]
        findings.append(Finding(
            "lmcache-roundtrip", Status.PASS, f"{a.name} → {b.name}",
            f"{a.name} stored {len(keys)} chunks of {stored.get('chunk_bytes')} B through "
            f"{a.config.deploykit_s3_bucket}.{a.config.deploykit_s3_fqdn}; {b.name} hit "
            f"{hits}/{len(keys)}, byte-identical"))
    else:
        findings.append(Finding(
            "lmcache-roundtrip", Status.FAIL, f"{a.name} → {b.name}",
            f"{b.name} hit {hits}/{len(keys)}, identical {identical}",
            "run `deploykit verify` for the cause (seed, credentials, DNS, region)"))
    if keys and all(k.startswith(expected_prefix) and k.endswith("@bfloat16") for k in keys):
        findings.append(Finding("lmcache-object-names", Status.PASS, a.name,
                                f"objects named {keys[0].replace('/', '_')}"))
    else:
        findings.append(Finding("lmcache-object-names", Status.FAIL, a.name,
                                f"unexpected object names {keys[:2]}",
                                "expected <model>@<tp*pp>@<rank>@<hash>@<dtype>"))
    missed = int(str(other.get("hits", 0))) == 0
    findings.append(Finding(
        "lmcache-seed-mismatch", Status.PASS if missed else Status.FAIL, b.name,
        f"with PYTHONHASHSEED={seed + 1} (fleet: {seed}) {b.name} computes other keys and "
        f"misses ({other.get('hits')}/{len(keys)} hits): every host must share one seed"
        if missed else f"PYTHONHASHSEED={seed + 1} still hit: keys do not depend on the seed"))
    return findings
