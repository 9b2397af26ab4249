"""Read the `versions` of each host's converge record, in one pass through Ansible's
connection layer (deploy_kit.transport.hosts, as verify reads hosts). Only that entry leaves
the host: the rest of the record (signatures, the digest of its inputs) stays there."""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterable
from typing import Any

from deploy_kit.config.site import Site
from deploy_kit.plan.upgrade import host_versions

# prints the record's versions ({} for a record without them), or `none` for no record
_SCRIPT = """\
p={path}
if [ ! -e "$p" ]; then echo none; exit 0; fi
for py in /usr/bin/python3 python3; do
  command -v "$py" >/dev/null 2>&1 || continue
  exec "$py" -c 'import json,sys
try:
    r = json.load(open(sys.argv[1]))
except (OSError, ValueError):
    print("none"); raise SystemExit
print(json.dumps((r.get("versions") or {{}}) if isinstance(r, dict) else {{}}))' "$p"
done
echo none
"""


def parse(output: str) -> dict[str, Any] | None:
    line = output.strip().splitlines()[-1] if output.strip() else "none"
    if line == "none":
        return None
    try:
        value = json.loads(line)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def read_versions(site: Site, hosts: Iterable[str] | None = None
                  ) -> dict[str, dict[str, Any] | str | None]:
    """Each versioned host's recorded versions: a dict ({} for a record that keeps none),
    None for no record, or a string saying why it could not be read (unreachable)."""
    from deploy_kit.transport.hosts import run_many

    names = sorted(site.hosts) if hosts is None else sorted(hosts)
    chosen = [site.hosts[n] for n in names if host_versions(site.hosts[n])]
    results = run_many(site, [(h, _SCRIPT.format(path=shlex.quote(
        h.config.deploykit_common_record_path))) for h in chosen], timeout=60)
    read: dict[str, dict[str, Any] | str | None] = {}
    for r in results:
        if r.error is not None or r.rc not in (0, None):
            read[r.host] = r.error or f"the script exited {r.rc}"
        else:
            read[r.host] = parse(r.stdout)
    return read
