"""The serving front's render (render/serving_front.py) and what it changes around vLLM:
vLLM on loopback only, the front on the public ports with the monitoring hosts' /metrics,
the key digest the role writes, and the settings that place it. The real HAProxy runs
this render in tests/integration/test_haproxy_vllm_front.py."""

from __future__ import annotations

import copy
import hashlib
import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from deploy_kit.config import names
from deploy_kit.config.rules_ports import ports_in_use
from deploy_kit.ops.rundir import SETTINGS_PATH, role_tree
from deploy_kit.ops.site import open_site
from deploy_kit.render import serving_front
from deploy_kit.render.files import render_site
from deploy_kit.verify.probes.serving_probe import exec_argv
from tests.conftest import BASE_HOSTS, REPO, InventoryFactory
from tests.tools import require_tool
from tests.unit.test_validation import problems

PLUGINS = REPO / "plugins" / "filter"


def _hosts(monitoring: str | None = "10.0.0.41") -> dict[str, Any]:
    hosts: dict[str, Any] = copy.deepcopy(BASE_HOSTS)
    if monitoring:
        hosts["all"]["children"]["monitoring"] = {"hosts": {"mon1": {"ansible_host": monitoring}}}
    return hosts


def test_vllm_listens_on_loopback_and_the_front_on_the_public_port(
        make_inventory: InventoryFactory) -> None:
    site = open_site(str(make_inventory(_hosts())))
    files = render_site(site)["gpu1"]
    argv = exec_argv(files[names.VLLM_UNIT_PATH].content)
    assert argv[argv.index("--host") + 1] == "127.0.0.1"
    assert argv[argv.index("--port") + 1] == "18000"
    cfg = files[names.VLLM_FRONT_CFG_PATH].content
    assert "    bind :8000\n" in cfg and "    server vllm 127.0.0.1:18000\n" in cfg
    # the side doors are refused, not forwarded: only these three paths pass the deny
    assert "http-request deny deny_status 404 unless api or health or metrics" in cfg
    assert "acl api path_beg /v1/\n" in cfg
    assert "http-request deny deny_status 401 if api !bearer" in cfg
    assert f"-f {names.VLLM_FRONT_KEYS_PATH}" in cfg
    unit = files[names.VLLM_FRONT_UNIT_PATH].content
    assert f"CONFIG={names.VLLM_FRONT_CFG_PATH}" in unit and "ExecReload=" in unit
    # every host of the site renders vLLM on loopback (no 0.0.0.0 anywhere)
    for host_files in render_site(site).values():
        for path, rendered in host_files.items():
            if path.startswith("/etc/systemd/system/vllm"):
                assert "0.0.0.0" not in rendered.content, path


def test_metrics_sources_are_loopback_the_monitoring_hosts_and_the_sites_list(
        make_inventory: InventoryFactory) -> None:
    site = open_site(str(make_inventory(_hosts(), vllm={
        "vllm_metrics_sources": ["10.5.0.0/24", "10.0.0.41", "fd00::7"]})))
    host = site.hosts["gpu1"]
    assert serving_front.metrics_sources(site, host) == [
        "127.0.0.1", "::1", "10.0.0.41", "10.5.0.0/24", "fd00::7"]
    cfg = render_site(site)["gpu1"][names.VLLM_FRONT_CFG_PATH].content
    assert "    acl monitoring src 127.0.0.1 ::1 10.0.0.41 10.5.0.0/24 fd00::7\n" in cfg
    alone = open_site(str(make_inventory(_hosts(None), vllm={})))
    assert serving_front.metrics_sources(alone, alone.hosts["gpu1"]) == ["127.0.0.1", "::1"]


def test_a_site_without_a_key_still_refuses_every_other_path(
        make_inventory: InventoryFactory) -> None:
    site = open_site(str(make_inventory(_hosts(), vllm={"vllm_api_key_required": False})))
    cfg = render_site(site)["gpu1"][names.VLLM_FRONT_CFG_PATH].content
    assert "bearer" not in cfg and "vllm-front.keys" not in cfg
    assert "http-request deny deny_status 404 unless api or health or metrics" in cfg
    assert "http-request deny deny_status 403 if metrics !monitoring\n" in cfg


def test_the_key_digest_is_haproxys_hex_of_the_authorization_value() -> None:
    expected = hashlib.sha256(b"Bearer s3cret").hexdigest().upper()
    assert serving_front.key_digest("s3cret") == expected
    # the role computes it with the same function (no second implementation to drift)
    import importlib.util

    spec = importlib.util.spec_from_file_location("deploykit_env", PLUGINS / "deploykit_env.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.FilterModule().filters()["vllm_front_digest"]("s3cret") == expected


def test_the_role_gets_both_ports_and_the_record_watches_the_front(
        make_inventory: InventoryFactory) -> None:
    site = open_site(str(make_inventory(_hosts(), vllm={"vllm_loopback_port": 28000})))
    settings = json.loads(role_tree(site)["gpu1"][SETTINGS_PATH].content)
    assert [(i["port"], i["loopback_port"]) for i in settings["_vllm_instances"]] == [
        (8000, 28000)]
    assert settings["_vllm_front_unit"] == names.VLLM_FRONT_UNIT
    assert settings["_vllm_front_keys_path"] == names.VLLM_FRONT_KEYS_PATH
    record = settings["_deploykit_converged"]
    assert names.VLLM_FRONT_UNIT in record["units"]
    assert {names.VLLM_FRONT_CFG_PATH, names.VLLM_FRONT_UNIT_PATH,
            names.VLLM_FRONT_KEYS_PATH} <= set(record["paths"])


@pytest.mark.parametrize(("settings", "key", "text"), [
    ({"vllm_loopback_port": 8000}, "vllm_loopback_port", "port 8000 is also used by vllm_port"),
    ({"vllm_loopback_port": 443}, "vllm_loopback_port", "port 443 is privileged"),
    ({"vllm_metrics_sources": ["prometheus.example.com"]}, "vllm_metrics_sources",
     "is not an address or network"),
    ({"vllm_metrics_sources": ["10.0.0.0/33"]}, "vllm_metrics_sources",
     "is not an address or network"),
])
def test_bad_front_settings_are_refused(make_inventory: InventoryFactory,
                                        settings: dict[str, Any], key: str, text: str) -> None:
    found = problems(make_inventory, _hosts(), vllm=settings)
    assert any(p.key.startswith(key) and text in p.message for p in found), found


def test_the_public_port_may_be_privileged_the_front_binds_it(
        make_inventory: InventoryFactory) -> None:
    site = open_site(str(make_inventory(_hosts(), vllm={"vllm_port": 80})))
    host = site.hosts["gpu1"]
    assert ports_in_use(host)[80] == "vllm_port" and ports_in_use(host)[18000] == \
        "vllm_loopback_port"
    assert "    bind :80\n" in render_site(site)["gpu1"][names.VLLM_FRONT_CFG_PATH].content


def test_extra_args_cannot_put_vllm_back_on_every_address(
        make_inventory: InventoryFactory) -> None:
    found = problems(make_inventory, _hosts(), vllm={"vllm_extra_args": ["--host", "0.0.0.0"]})
    assert any(p.key == "vllm_extra_args" and "--host" in p.message for p in found), found


def test_the_roles_front_tasks_write_the_digests_and_a_config_haproxy_accepts(
        make_inventory: InventoryFactory, tmp_path: Path) -> None:
    """roles/serving/tasks/front.yml's own file tasks, on localhost: the keys file holds
    key_digest of each accepted key (both during a rotation), 0600; the rendered config
    passes the task's `validate: haproxy -c` with it; check mode, one change, then none."""
    require_tool("haproxy")
    tasks = yaml.safe_load((REPO / "roles/serving/tasks/front.yml").read_text())
    wanted = {"Write the digests of the API keys the front accepts on /metrics",
              "Write the serving front's configuration"}
    chosen = [t for t in tasks if t["name"] in wanted]
    assert len(chosen) == 2
    keys = tmp_path / "vllm-front.keys"
    cfg = render_site(open_site(str(make_inventory(_hosts()))))["gpu1"][
        names.VLLM_FRONT_CFG_PATH].content
    rendered = tmp_path / "rendered.cfg"
    rendered.write_text(cfg.replace(names.VLLM_FRONT_KEYS_PATH, str(keys)))
    installed = tmp_path / "vllm-front.cfg"
    for task in chosen:
        copy_args = task["ansible.builtin.copy"]
        for owner in ("owner", "group"):  # root's on a host
            copy_args.pop(owner)
        task.pop("notify")
        if "src" in copy_args:
            copy_args["src"], copy_args["dest"] = str(rendered), str(installed)
    playbook = tmp_path / "play.yml"

    def run(*flags: str, **extra: str) -> int:
        playbook.write_text(yaml.safe_dump([{
            "hosts": "localhost", "gather_facts": False,
            "vars": {"vllm_api_key": "current-key", "_vllm_has_api_key": True,
                     "_vllm_front_keys_path": str(keys), **extra},
            "tasks": chosen}]))
        done = subprocess.run(
            [str(Path(sys.executable).parent / "ansible-playbook"), str(playbook),
             "-i", "localhost,", "-c", "local",
             "-e", f"ansible_python_interpreter={sys.executable}", *flags],
            capture_output=True, text=True, timeout=300, cwd=REPO, check=False,
            env={**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
                 "ANSIBLE_LOCALHOST_WARNING": "false"})
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        assert "current-key" not in done.stdout + done.stderr  # no_log
        found = re.search(r"changed=(\d+)", done.stdout)
        assert found
        return int(found.group(1))

    assert run("--check") == 2 and not keys.exists()
    assert run() == 2
    assert keys.read_text() == serving_front.key_digest("current-key") + "\n"
    assert stat.S_IMODE(keys.stat().st_mode) == 0o600
    assert installed.read_text() == rendered.read_text()
    assert (run(), run("--check")) == (0, 0)
    # a rotation: both keys are accepted until it finishes
    assert run(vllm_api_key_next="next-key") == 1
    assert keys.read_text().splitlines() == [serving_front.key_digest("current-key"),
                                             serving_front.key_digest("next-key")]
