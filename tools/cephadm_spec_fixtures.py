"""Regenerate tests/unit/data/cephadm_spec_export.json with Ceph's own ServiceSpec code.

Run it with a Python that imports Ceph's python-common (`ceph.deployment.service_spec`:
Debian's python3-ceph-common, or PYTHONPATH=<ceph checkout>/src/python-common):

    /usr/bin/python3 tools/cephadm_spec_fixtures.py

Each case's `input` is a spec as deploykit renders it (or wrote it before it rendered the
export shape) or as an operator might write it; `export` is what cephadm stores and `ceph
orch ls --export` prints: `ServiceSpec.from_json(input).to_json()`. The test compares
deploykit's normaliser (deploy_kit/render/cephadm_spec.py) with these.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml
from ceph.deployment.service_spec import ServiceSpec

OUT = Path(__file__).resolve().parents[1] / "tests" / "unit" / "data" / "cephadm_spec_export.json"

BASE = {
    "service_type": "rgw", "service_id": "standard", "service_name": "rgw.standard",
    "placement": {"count_per_host": 4, "hosts": ["rgw1", "rgw2"]},
    "extra_container_args": ["--stop-timeout=130"],
    "config": {"rgw_dns_name": "s3.example.test", "rgw_exit_timeout_secs": "120",
               "rgw_graceful_stop": "true"},
    "spec": {"rgw_frontend_port": 8080},
}


def cases() -> dict[str, dict]:
    example = yaml.safe_load(sys.stdin.read()) if not sys.stdin.isatty() else dict(BASE)
    return {
        # the example's spec as deploykit rendered it before (config at the top level)
        "example-config-top-level": example,
        "two-gateways-with-networks": {**BASE, "networks": ["10.0.0.0/24", "10.0.1.0/24"]},
        "multisite-names": {**BASE, "spec": {"rgw_frontend_port": 8080, "rgw_realm": "kv",
                                             "rgw_zonegroup": "kv-zg", "rgw_zone": "kv-a"}},
        "realm-and-zone": {**BASE, "spec": {"rgw_frontend_port": 8080, "rgw_realm": "kv",
                                            "rgw_zone": "kv-a"}},
        # operator-written variants: a network string, false and empty values, a config key
        # with spaces, old-style fields at the top level, only a service_name
        "network-string-and-falsy-values": {
            "service_type": "rgw", "service_id": "x", "networks": "10.9.0.0/16",
            "unmanaged": False, "placement": {"label": "rgw", "count": 2},
            "config": {"rgw dns name": "s3.x.test"},
            "spec": {"ssl": False, "rgw_frontend_type": None, "rgw_frontend_port": 8000}},
        "old-style-top-level-fields": {"service_type": "rgw", "service_id": "y",
                                       "placement": {"hosts": ["a", "b"]},
                                       "rgw_frontend_port": 7480, "unmanaged": True},
        "service-name-only": {"service_name": "rgw.z", "placement": {"count": 1},
                              "spec": {"rgw_frontend_port": 9000}},
    }


def main() -> None:
    version = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", "python3-ceph-common"],
                             capture_output=True, text=True).stdout.strip()
    out = {"ceph": {"source": "ceph.deployment.service_spec as imported by "
                              f"{sys.executable}",
                    "module": sys.modules["ceph.deployment.service_spec"].__file__,
                    "debian_package": f"python3-ceph-common {version}" if version else None,
                    # Debian builds it from the upstream release tag of the same version
                    "upstream": f"ceph/ceph tag v{version.split('+')[0]}" if version else None},
           "cases": []}
    for name, doc in cases().items():
        try:
            spec = ServiceSpec.from_json(json.loads(json.dumps(doc)))
        except Exception as exc:  # a field this Ceph's RGWSpec does not know: recorded
            out["cases"].append({"name": name, "input": doc, "refused": str(exc)})
            continue
        export = json.loads(json.dumps(spec.to_json()))
        out["cases"].append({"name": name, "input": doc, "export": export})
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {len(out['cases'])} cases to {OUT}")


if __name__ == "__main__":
    main()
