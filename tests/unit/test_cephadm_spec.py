"""cephadm mode re-applies nothing on a re-run: deploykit renders the RGW
spec as `ceph orch ls --export` prints it, and the role compares both sides after the same
normalisation. Checked against Ceph's own ServiceSpec: fixtures it produced
(tests/unit/data/cephadm_spec_export.json, tools/cephadm_spec_fixtures.py), the real code
where this machine can import it, and the role's tasks run against a `ceph` that stores
the applied spec and exports it through that code."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from deploy_kit.ops.site import open_site
from deploy_kit.render.cephadm_spec import export_shape
from deploy_kit.render.files import render_site, write_tree
from tests.conftest import REPO, InventoryFactory

FIXTURES = json.loads((REPO / "tests" / "unit" / "data" / "cephadm_spec_export.json")
                      .read_text())
CASES = [c for c in FIXTURES["cases"] if "export" in c]
SPEC = "cephadm/rgw-spec.yaml"
# a Python that imports Ceph's python-common (Debian's python3-ceph-common): the system one
CEPH_PYTHON = next((p for p in ("/usr/bin/python3", sys.executable) if shutil.which(p) and
                    subprocess.run([p, "-c", "import ceph.deployment.service_spec"],
                                   capture_output=True).returncode == 0), None)
needs_ceph = pytest.mark.skipif(CEPH_PYTHON is None,
                                reason="no Python here imports ceph.deployment.service_spec")


def test_fixtures_name_the_ceph_they_came_from() -> None:
    assert "16.2.15" in FIXTURES["ceph"]["debian_package"]
    assert len(CASES) >= 6


@pytest.mark.parametrize("case", CASES, ids=lambda c: c["name"])
def test_normaliser_matches_cephs_export(case: dict[str, Any]) -> None:
    assert export_shape(case["input"]) == case["export"]
    assert export_shape(case["export"]) == case["export"]  # a fixed point


def test_a_raw_comparison_would_reapply_the_old_layout() -> None:
    old = next(c for c in CASES if c["name"] == "example-config-top-level")
    assert "config" in old["input"] and old["input"] != old["export"]  # what the role saw


def _ceph_export(docs: list[Any]) -> list[Any]:
    """ServiceSpec.from_json(doc).to_json() for each doc, by Ceph's own code."""
    assert CEPH_PYTHON is not None
    script = ("import json, sys\nfrom ceph.deployment.service_spec import ServiceSpec\n"
              "print(json.dumps([ServiceSpec.from_json(d).to_json() for d in "
              "json.load(sys.stdin)]))")
    done = subprocess.run([CEPH_PYTHON, "-c", script], input=json.dumps(docs),
                          capture_output=True, text=True, check=True)
    return list(json.loads(done.stdout))


@needs_ceph
def test_rendered_specs_are_what_ceph_exports(make_inventory: InventoryFactory) -> None:
    sites = [REPO / "inventory" / "example",
             make_inventory(all={"ceph_rgw_networks": ["10.0.0.0/24"],
                                 "ceph_rgw_realm": "kv", "ceph_rgw_zone": "kv-a",
                                 "ceph_rgw_zonegroup": "kv-zg",
                                 "deploykit_ceph_version": "18.2.4"})]
    docs = [yaml.safe_load(render_site(open_site(str(s)))["_cluster"][SPEC].content)
            for s in sites]
    # 16.2's RGWSpec has no rgw_zonegroup (later releases do): compare the rest
    docs[1]["spec"].pop("rgw_zonegroup")
    assert _ceph_export(docs) == docs
    inputs = [c["input"] for c in CASES]
    assert [export_shape(d) for d in inputs] == _ceph_export(inputs)


FAKE_CEPH = r"""#!/bin/sh
# ceph --conf CONF <words>: keeps the applied spec, exports it as cephadm does
state="$FAKE_CEPH_STATE"
shift 2
echo "$*" >> "$state/log"
case "$*" in
  "orch ls --service_name "*" --export --format yaml")
    [ -f "$state/spec.yaml" ] || { echo "No services reported"; exit 0; }
    "$CEPH_PYTHON" -c 'import json, sys, yaml
from ceph.deployment.service_spec import ServiceSpec
spec = ServiceSpec.from_json(yaml.safe_load(sys.stdin))
print(yaml.safe_dump(json.loads(json.dumps(spec.to_json())), sort_keys=False))' \
      < "$state/spec.yaml" ;;
  "orch apply -i -") cat > "$state/spec.yaml"; echo "Scheduled rgw.standard update..." ;;
  "health detail --format json") echo '{"status": "HEALTH_OK", "checks": {}}' ;;
  "orch ps --service_name "*" --format json") echo '[{"status_desc": "running"}]' ;;
  *) echo "unexpected: $*" >&2; exit 22 ;;
esac
"""


def _play(tmp: Path, render: Path, python_has_ceph: bool) -> tuple[int, str]:
    """One run of the role's cephadm.yml; (changed count, output)."""
    bin_dir = tmp / "bin"
    playbook = tmp / "play.yml"
    playbook.write_text(yaml.safe_dump([{
        "hosts": "adm1", "gather_facts": False,
        "vars": {"deploykit_render_dir": str(render), "deploykit_ceph_conf": "/x/ceph.conf",
                 "ceph_rgw_service_id": "standard", "ceph_rgw_drain_timeout": 10,
                 "_deploykit_site": {"rgw_daemons": 1}},
        "tasks": [{"ansible.builtin.import_tasks":
                   str(REPO / "roles" / "ceph_rgw" / "tasks" / "cephadm.yml")}]}]))
    (tmp / "hosts.yml").write_text(yaml.safe_dump({"all": {"children": {"ceph_admin": {
        "hosts": {"adm1": {"ansible_connection": "local",
                           "ansible_python_interpreter": sys.executable}}}}}}))
    # the admin host's python3: one that imports Ceph's python-common, or one that does not
    python = CEPH_PYTHON if python_has_ceph else sys.executable
    (bin_dir / "python3").unlink(missing_ok=True)
    (bin_dir / "python3").symlink_to(str(python))
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
           "FAKE_CEPH_STATE": str(tmp / "state"), "CEPH_PYTHON": str(CEPH_PYTHON),
           "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    done = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i",
                           str(tmp / "hosts.yml"), str(playbook)], capture_output=True,
                          text=True, timeout=300, cwd=REPO, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    recap = re.search(r"^adm1\s*:.*changed=(\d+)", done.stdout, re.M)
    assert recap, done.stdout[-2000:]
    return int(recap.group(1)), done.stdout


@needs_ceph
@pytest.mark.parametrize("python_has_ceph", [True, False], ids=["ceph-python", "no-ceph-python"])
def test_the_role_applies_once_and_a_rerun_changes_nothing(
        make_inventory: InventoryFactory, tmp_path: Path, python_has_ceph: bool) -> None:
    (tmp_path / "bin").mkdir()
    (tmp_path / "state").mkdir()
    (tmp_path / "bin" / "ceph").write_text(FAKE_CEPH)
    (tmp_path / "bin" / "ceph").chmod(0o755)
    render = tmp_path / "render"
    write_tree(render_site(open_site(str(make_inventory()))), render)
    applied = lambda: (tmp_path / "state" / "log").read_text().count("orch apply")  # noqa: E731
    assert _play(tmp_path, render, python_has_ceph)[0] == 1 and applied() == 1
    assert _play(tmp_path, render, python_has_ceph)[0] == 0 and applied() == 1
    # the spec as deploykit used to write it (config at the top level): still no change
    spec = render / "_cluster" / SPEC
    doc = yaml.safe_load(spec.read_text())
    old = {k: v for k, v in doc.items() if k != "spec"}
    old["config"] = doc["spec"].pop("config")
    old["spec"] = doc["spec"]
    spec.write_text(yaml.safe_dump(old, sort_keys=False))
    assert _play(tmp_path, render, python_has_ceph)[0] == 0 and applied() == 1
    # a real change is applied
    old["spec"]["rgw_frontend_port"] = 8081
    spec.write_text(yaml.safe_dump(old, sort_keys=False))
    assert _play(tmp_path, render, python_has_ceph)[0] == 1 and applied() == 2
