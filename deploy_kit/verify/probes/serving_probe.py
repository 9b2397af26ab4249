"""Read what a serving host really runs: LMCache YAML, env, unit argv, profile, resolver."""

from __future__ import annotations

import configparser
import shlex

import yaml

from deploy_kit.config.site import Host
from deploy_kit.render import names
from deploy_kit.transport.ssh import run_on, sections
from deploy_kit.verify.model import ServingHost

VERSIONS_PY = ("import importlib.metadata as m\n"
               "for d in ('lmcache', 'vllm', 'nixl', 'torch'):\n"
               "    try: print(d, m.version(d))\n"
               "    except Exception: pass\n")


def script(host: Host, lookups: list[str]) -> str:
    c = host.config
    port = c.vllm_port
    getent = "; ".join(f"echo @{n}; getent ahostsv4 {shlex.quote(n)} | awk '{{print $1}}' | "
                       "sort -u" for n in lookups)
    return f"""
echo '### lmcache'
cat {shlex.quote(names.lmcache_config_path(c))} 2>/dev/null || echo __MISSING__
echo '### env'; cat {shlex.quote(names.vllm_env_path(c))} 2>/dev/null
echo '### unit'; cat {names.VLLM_UNIT_PATH} 2>/dev/null
echo '### credentials'
cat {shlex.quote(names.credentials_path(c))} 2>/dev/null
echo '### resolv'; cat /etc/resolv.conf 2>/dev/null
echo '### getent'; {getent}
echo '### shm'; df -B1 --output=size /dev/shm 2>/dev/null | tail -1
echo '### mem'; awk '/MemTotal/ {{print $2 * 1024}}' /proc/meminfo
echo '### versions'
{shlex.quote(c.vllm_venv)}/bin/python -c {shlex.quote(VERSIONS_PY)} 2>/dev/null
nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1 \
  | sed 's/^/cuda-driver /'
echo '### active'; systemctl is-active vllm 2>/dev/null
echo '### health'
for p in /health /v1/models; do
  curl -s -o /dev/null -m 3 -w '%{{http_code}}' http://127.0.0.1:{port}$p; echo
done
"""


def exec_argv(unit: str) -> list[str]:
    """ExecStart of a unit as argv (continuation lines joined, systemd quoting undone)."""
    joined = unit.replace("\\\n", " ")
    for line in joined.splitlines():
        if line.startswith("ExecStart="):
            text = line.removeprefix("ExecStart=").replace("%%", "%").replace("$$", "$")
            return shlex.split(text)
    return []


def parse(host: Host, output: str) -> ServingHost:
    s = sections(output)
    observed = ServingHost(name=host.name, address=host.address)
    raw = s.get("lmcache", "__MISSING__").strip()
    if raw != "__MISSING__":
        try:
            loaded = yaml.safe_load(raw)
            observed.lmcache_yaml = loaded if isinstance(loaded, dict) else {}
        except yaml.YAMLError:
            observed.lmcache_yaml = {}
    for line in s.get("env", "").splitlines():
        if "=" in line and not line.startswith("#"):
            key, value = line.split("=", 1)
            observed.env[key.strip()] = value.strip()
    observed.argv = exec_argv(s.get("unit", ""))
    if s.get("credentials", "").strip():
        parser = configparser.ConfigParser()
        try:
            parser.read_string(s["credentials"])
            profile = observed.env.get("AWS_PROFILE", "default")
            if parser.has_section(profile):
                observed.credentials = {
                    "access_key": parser.get(profile, "aws_access_key_id", fallback=""),
                    "secret_key": parser.get(profile, "aws_secret_access_key", fallback="")}
        except configparser.Error:
            observed.credentials = None
    observed.resolv_nameservers = [line.split()[1] for line in s.get("resolv", "").splitlines()
                                   if line.startswith("nameserver") and len(line.split()) > 1]
    current = None
    for line in s.get("getent", "").splitlines():
        if line.startswith("@"):
            current = line[1:]
            observed.resolved[current] = []
        elif current and line.strip():
            observed.resolved[current].append(line.strip())
    if s.get("shm", "").strip().isdigit():
        observed.shm_bytes = int(s["shm"].strip())
    if s.get("mem", "").strip().isdigit():
        observed.mem_total_bytes = int(s["mem"].strip())
    for line in s.get("versions", "").splitlines():
        if " " in line:
            key, value = line.split(" ", 1)
            observed.versions[key] = value.strip()
    observed.service_active = s.get("active", "").strip() == "active"
    codes = s.get("health", "").split()
    if observed.service_active and len(codes) >= 2:
        observed.health_status = int(codes[0]) if codes[0].isdigit() else None
        observed.models_status = int(codes[1]) if codes[1].isdigit() else None
    return observed


def probe(host: Host, lookups: list[str]) -> ServingHost:
    try:
        return parse(host, run_on(host, script(host, lookups)))
    except Exception as exc:  # an unreachable host is a finding, not a crash
        return ServingHost(name=host.name, address=host.address, reachable=False,
                           error=f"{type(exc).__name__}: {exc}")
