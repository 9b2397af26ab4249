"""Read what a serving host really runs: LMCache YAML, env, unit argv, profile, resolver."""

from __future__ import annotations

import configparser
import json
import shlex
from typing import Any

import yaml

from deploy_kit.config.site import Host
from deploy_kit.render import lmcache_server, names
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
echo '### server_env'; cat {shlex.quote(lmcache_server.env_path(c))} 2>/dev/null
echo '### server_unit'; cat {lmcache_server.UNIT_PATH} 2>/dev/null
echo '### server_active'; systemctl is-active lmcache-server 2>/dev/null
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


def _flag(argv: list[str], name: str) -> str | None:
    for i, word in enumerate(argv):
        if word == name and i + 1 < len(argv):
            return argv[i + 1]
    return None


def server_view(argv: list[str]) -> dict[str, Any]:
    """The LMCache server's flags in lmcache.yaml's shape (what the LMCache checks read)."""
    view: dict[str, Any] = {"local_cpu": True}
    chunk = _flag(argv, "--chunk-size")
    if chunk is not None and chunk.isdigit():
        view["chunk_size"] = int(chunk)
    l1 = _flag(argv, "--l1-size-gb")
    try:
        view["max_local_cpu_size"] = float(l1) if l1 is not None else 0.0
    except ValueError:
        view["max_local_cpu_size"] = 0.0
    try:
        adapter = json.loads(_flag(argv, "--l2-adapter") or "null")
    except json.JSONDecodeError:
        adapter = {"type": "unreadable"}
    if isinstance(adapter, dict) and adapter.get("type") == "s3":
        endpoint = str(adapter.get("s3_endpoint", ""))
        view["remote_url"] = endpoint if endpoint.startswith("s3://") else f"s3://{endpoint}"
        view["extra_config"] = {k: v for k, v in adapter.items()
                                if k not in ("type", "s3_endpoint")}
    return view


def parse(host: Host, output: str) -> ServingHost:
    s = sections(output)
    observed = ServingHost(name=host.name, address=host.address)
    raw = s.get("lmcache", "__MISSING__").strip()
    server_argv = exec_argv(s.get("server_unit", ""))
    if server_argv:
        observed.lmcache_topology = "server"
        observed.lmcache_yaml = server_view(server_argv)
        observed.lmcache_server_active = s.get("server_active", "").strip() == "active"
    elif raw != "__MISSING__":
        try:
            loaded = yaml.safe_load(raw)
            observed.lmcache_yaml = loaded if isinstance(loaded, dict) else {}
        except yaml.YAMLError:
            observed.lmcache_yaml = {}
    # the server's env first: it holds the AWS profile there; vLLM's wins where both set
    for line in (s.get("server_env", "") + "\n" + s.get("env", "")).splitlines():
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
