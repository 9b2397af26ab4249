"""What the router role is handed and what a router host's converge record watches: the
shipped lock and its digest, the files and units the role writes, the plays that list the
router group, and the inputs refused before any host is touched."""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path

import pytest
import yaml

from deploy_kit.config.site import GROUPS
from deploy_kit.core.errors import InventoryError
from deploy_kit.core.router_lock import lock_path
from deploy_kit.ops.rundir import SETTINGS_PATH, role_tree
from deploy_kit.ops.site import open_site
from tests.conftest import CPU_TWO_INSTANCES, REPO, InventoryFactory


def _routed(**router_vars: object) -> dict:
    hosts = copy.deepcopy(CPU_TWO_INSTANCES)
    hosts["all"]["children"]["router"] = {"hosts": {"r1": {"ansible_host": "10.0.2.1"},
                                                    "r2": {"ansible_host": "10.0.2.2"}},
                                          "vars": router_vars}
    return hosts


def _settings(root: Path) -> dict[str, dict]:
    tree = role_tree(open_site(str(root)))
    return {host: json.loads(files[SETTINGS_PATH].content)
            for host, files in tree.items() if SETTINGS_PATH in files}


def test_a_router_host_is_handed_the_shipped_lock_and_its_digest(
        make_inventory: InventoryFactory) -> None:
    settings = _settings(make_inventory(_routed()))
    r1 = settings["r1"]
    lock = lock_path("0.1.17")
    assert r1["_router_lock_path"] == str(lock)
    assert r1["_router_lock_digest"] == hashlib.sha256(lock.read_bytes()).hexdigest()
    assert r1["_router_lock_marker_path"] == "/opt/deploykit/router/.deploykit-router-lock"
    assert r1["_router_wheel_archive"] is False  # no router_wheel_dir: from PyPI
    assert r1["_router_has_api_key"] is True  # the key is required by default
    assert r1["_router_unit"] == "vllm-router"
    assert r1["_router_front_unit"] == "vllm-router-front"
    # a serving host that routes nothing is handed no lock
    assert "_router_lock_path" not in settings["cpu1"]


def test_a_staged_wheel_directory_ships_as_one_archive(make_inventory: InventoryFactory,
                                                        tmp_path: Path) -> None:
    staged = tmp_path / "router-wheels"
    staged.mkdir()
    (staged / "wheelhouse.tar").write_bytes(b"")
    loose = tmp_path / "loose-wheels"
    loose.mkdir()
    assert _settings(make_inventory(_routed(router_wheel_dir=str(staged))))["r1"][
        "_router_wheel_archive"] is True
    assert _settings(make_inventory(_routed(router_wheel_dir=str(loose))))["r1"][
        "_router_wheel_archive"] is False


def test_the_record_watches_what_the_router_role_writes_and_runs(
        make_inventory: InventoryFactory) -> None:
    """A hand edit or a stopped router on a router host converges it again; a second `up`
    of an unchanged router host leaves it out (the same names the role's tasks read)."""
    settings = _settings(make_inventory(_routed()))
    watch = settings["r1"]["_deploykit_converged"]
    for path in ("/etc/systemd/system/vllm-router.service", "/etc/deploykit-router/launch.py",
                 "/etc/haproxy/vllm-router-front.cfg",
                 "/etc/systemd/system/vllm-router-front.service",
                 "/etc/deploykit-router/secret.env", "/etc/haproxy/vllm-router-front.keys",
                 "/opt/deploykit/router/.deploykit-router-lock",
                 "/etc/consul.d/llm-service.json", "/etc/consul.d/secrets.json"):
        assert path in watch["paths"], path
    assert {"vllm-router", "vllm-router-front", "consul"} <= set(watch["units"])
    serving = settings["cpu1"]["_deploykit_converged"]
    assert not {"vllm-router", "vllm-router-front"} & set(serving["units"])
    assert "/etc/haproxy/vllm-router-front.keys" not in serving["paths"]


def test_without_a_key_no_instance_key_file_is_watched(make_inventory: InventoryFactory) -> None:
    root = make_inventory(_routed(), all={"vllm_api_key_required": False})
    r1 = _settings(root)["r1"]
    assert r1["_router_has_api_key"] is False
    assert r1["_router_secret_env_path"] is None
    assert "/etc/deploykit-router/secret.env" not in r1["_deploykit_converged"]["paths"]


def test_a_router_version_without_a_lock_is_refused(make_inventory: InventoryFactory) -> None:
    root = make_inventory(_routed(router_version="0.0.1"))
    with pytest.raises(InventoryError) as err:
        open_site(str(root))
    problems = [p for p in err.value.problems if p.key == "router_version"]
    assert problems and "0.0.1 has no hash-pinned lock" in str(problems[0])
    assert "0.1.17" in str(problems[0])  # names the versions deploykit ships


def test_a_router_wheel_dir_is_held_to_the_controller_directory_rules(
        make_inventory: InventoryFactory) -> None:
    root = make_inventory(_routed(router_wheel_dir="/etc"))
    with pytest.raises(InventoryError) as err:
        open_site(str(root))
    assert [p.key for p in err.value.problems] == ["router_wheel_dir"]


def _patterns(playbook: str) -> list[str]:
    return [play["hosts"] for play in yaml.safe_load((REPO / "playbooks" / playbook)
                                                     .read_text()) if "hosts" in play]


def test_the_plays_over_every_host_name_every_group() -> None:
    """converged.yml, record.yml and down.yml's first play list every group whose hosts a
    role converges: a group left out would never be skipped, recorded or forgotten."""
    every = {"ceph_admin[0]", *(set(GROUPS) - {"ceph_admin"})}
    assert set(_patterns("converged.yml")[0].split(":")) == every
    assert set(_patterns("record.yml")[0].split(":")) == every | {"!deploykit_converged"}
    assert set(_patterns("down.yml")[0].split(":")) == every
    # every Consul agent's group joins the Consul plays and the secrets check
    consul = _patterns("dns.yml")
    assert {"consul_servers", "rgw", "router"} <= set(consul[0].split(":"))
    assert "router" in consul[2].split(":")  # the non-server agents' roll
    assert {"consul_servers", "rgw", "vllm", "router"} <= set(
        _patterns("secrets_agree.yml")[0].split(":"))


def test_the_site_routes_after_serving_and_rolls_one_router_at_a_time() -> None:
    site = [play["ansible.builtin.import_playbook"] for play in
            yaml.safe_load((REPO / "playbooks" / "site.yml").read_text())]
    assert site.index("serving.yml") < site.index("router.yml") < site.index("monitoring.yml")
    plays = yaml.safe_load((REPO / "playbooks" / "router.yml").read_text())
    assert plays[0]["hosts"] == "router:!deploykit_converged"
    assert plays[1]["hosts"] == "router_restart_due:!deploykit_converged"
    assert plays[1]["serial"] == 1 and plays[1]["max_fail_percentage"] == 0
    # a key rotation reaches the routers' fronts before the serving hosts drop the old key
    rotate = [play["ansible.builtin.import_playbook"] for play in
              yaml.safe_load((REPO / "playbooks" / "rotate_vllm_key.yml").read_text())]
    assert rotate.index("router.yml") < rotate.index("serving.yml")


def test_a_router_host_is_given_the_sites_api_key(make_inventory: InventoryFactory) -> None:
    """The front checks the key and the router sends it: deploykit's own clients of a router
    (verify, bench --via-router) read it from the router host, as Ansible does."""
    from deploy_kit.config import site_secrets
    from deploy_kit.transport.openai import api_key

    site = open_site(str(make_inventory(_routed())))
    assert site_secrets.needs(site.hosts["r1"], "vllm_api_key")
    assert "r1" in site_secrets.hosts_lacking(site, "vllm_api_key")
    filled = site_secrets.fill(site, {"vllm_api_key": "k" * 32})
    assert api_key(filled.hosts["r1"]) == api_key(filled.hosts["cpu1"]) == "k" * 32
    assert not site_secrets.needs(site.hosts["rgw1"], "vllm_api_key")
