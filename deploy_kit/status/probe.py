"""The one read-only script `status` runs on each host (pure: text in, text out).

Each host prints `### name` sections (transport.hosts.sections): its clock, every deploykit
unit's systemd state, the versions of what it runs, the LMCache S3 breaker in the running
process's journal, each vLLM instance's /health, and its converge record's age and units.
Only what the host's groups run is asked, so a gateway never starts a Python venv."""

from __future__ import annotations

import shlex

from deploy_kit.config import names
from deploy_kit.config.site import Host
from deploy_kit.plan import watch
from deploy_kit.plan.serving import serving_host
from deploy_kit.verify.probes.serving_probe import VERSIONS_PY

PROPERTIES = "Id,LoadState,ActiveState,SubState,Result,StateChangeTimestamp"
TIMEOUT = 30  # seconds for one host's script (`ceph versions` on the admin host is the slowest)
# the converge record's watched units (plugins/modules/deploykit_converged.py), one a line;
# python3 is on every host Ansible manages
RECORD_UNITS_PY = ("import json, sys\n"
                   "try: print('\\n'.join(json.load(open(sys.argv[1])).get('units', [])))\n"
                   "except Exception as e: print('__UNREADABLE__ %s' % type(e).__name__)\n")


def units(host: Host) -> list[str]:
    """The deploykit units this host's groups run: what its converge record watches."""
    return watch.watched_units(host)


def script(host: Host) -> str:
    c = host.config
    groups = host.groups
    parts = ["echo '### now'; date +%s"]
    unit_list = " ".join(shlex.quote(u) for u in units(host))
    if unit_list:
        # --timestamp=unix (systemd 248+) for an exact "since"; older systemd prints dates
        parts.append(
            "echo '### units'\n"
            f"for u in {unit_list}; do echo \"@$u\"\n"
            f"  systemctl show -p {PROPERTIES} --timestamp=unix \"$u\" 2>/dev/null || "
            f"systemctl show -p {PROPERTIES} \"$u\" 2>/dev/null; done")
    versions = []
    if groups & {"rgw", "ceph_admin"}:
        # packages mode: radosgw on the host; cephadm: the host's ceph CLI
        versions.append("(radosgw --version 2>/dev/null || ceph --version 2>/dev/null) "
                        "| head -1 | sed 's/^/ceph /'")
    if "rgw" in groups:
        versions.append("haproxy -v 2>/dev/null | head -1 | sed 's/^/haproxy /'")
    if groups & watch.CONSUL_HOSTS:
        versions.append(f"{names.CONSUL_BINARY_PATH} version 2>/dev/null | head -1 "
                        "| sed 's/^/consul /'")
    if "dns" in groups:
        versions.append(f"{names.COREDNS_BINARY_PATH} -version 2>/dev/null | head -1 "
                        "| sed 's/^/coredns /'")
    if "vllm" in groups:
        venv = shlex.quote(c.vllm_venv)
        versions.append(f"[ -x {venv}/bin/python ] && {venv}/bin/python -c "
                        f"{shlex.quote(VERSIONS_PY)} 2>/dev/null")
    if versions:
        parts.append("echo '### versions'\n" + "\n".join(versions))
    if "ceph_admin" in groups:
        conf = shlex.quote(c.deploykit_ceph_conf)
        # every Ceph daemon's version, cluster-wide: a mix in the middle of a Ceph upgrade
        parts.append(f"echo '### ceph_versions'; timeout 15 ceph --conf {conf} versions "
                     "-f json 2>&1 | head -c 20000; echo")
    breaker_units, pattern = watch.breaker(host)
    if breaker_units and pattern:
        # LMCache turns S3 off for the life of the process: only the current invocation's
        # journal counts (the words verify and the heal task read: core/patterns.py)
        parts.append(
            "echo '### breaker'\n"
            f"for u in {' '.join(shlex.quote(u) for u in breaker_units)}; do\n"
            "  id=$(systemctl show -p InvocationID --value \"$u\" 2>/dev/null)\n"
            "  [ -n \"$id\" ] || continue\n"
            "  echo \"@$u\"\n"
            "  journalctl _SYSTEMD_INVOCATION_ID=\"$id\" -o short-iso --no-pager -q 2>/dev/null"
            f" | grep -m1 -E {shlex.quote(pattern)} | cut -c1-300\n"
            "done")
    serving = serving_host(host)
    if serving.serves:
        # the API key (if any) from the host's own 0600 file, as a header on curl's stdin:
        # never in argv or in this script (verify's serving probe does the same)
        secret = shlex.quote(serving.secret_env_path)
        auth = (f"vllm_auth() {{ ( [ -r {secret} ] && . {secret} && [ -n \"$VLLM_API_KEY\" ] "
                "&& printf 'Authorization: Bearer %s\\n' \"$VLLM_API_KEY\" ) 2>/dev/null; }\n")
        checks = "\n".join(
            f"echo \"{i.unit} {i.port} $(vllm_auth | curl -s -o /dev/null -m 3 -H @- "
            f"-w '%{{http_code}}' http://127.0.0.1:{i.port}/health)\""
            for i in serving.instances)
        parts.append("echo '### health'\n" + auth + checks)
    record = shlex.quote(c.deploykit_common_record_path)
    parts.append(f"echo '### record'\nif [ -e {record} ]; then stat -c %Y {record}; "
                 f"python3 -c {shlex.quote(RECORD_UNITS_PY)} {record} 2>/dev/null; "
                 "else echo __NONE__; fi")
    return "\n".join(parts) + "\n"
