"""The tree a run hands the playbooks: complete, secret-free, and `-e` cannot bypass it."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from deploy_kit.ansible.extra_vars import check_extra_vars
from deploy_kit.core.errors import InventoryError
from deploy_kit.ops.rundir import SETTINGS_PATH, SITE_PATH, role_tree, write_run_tree
from deploy_kit.ops.site import open_site
from deploy_kit.render.files import render_site
from tests.cli import run_cli
from tests.conftest import REPO, InventoryFactory


def test_role_tree_is_render_without_secrets_plus_settings(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DK_GOLDEN_ACCESS", "GOLDENACCESSKEY")
    monkeypatch.setenv("DK_GOLDEN_SECRET", "golden-secret-not-real")
    site = open_site(str(REPO / "tests" / "golden" / "packages-static" / "inventory"))
    full = render_site(site)
    tree = role_tree(site)
    for host, files in full.items():
        for path, rendered in files.items():
            if rendered.secret:
                assert path not in tree[host], f"{host}{path} holds a secret"
            else:
                assert tree[host][path].content == rendered.content
    for name in site.hosts:
        settings = json.loads(tree[name][SETTINGS_PATH].content)
        assert "deploykit_s3_secret_key" not in settings
        assert settings["_deploykit_files"] == sorted(
            p for p, f in full[name].items() if not f.secret)
    facts = json.loads(tree["_cluster"][SITE_PATH].content)
    assert set(facts) == {"ceph", "lifecycle", "gateways", "dns_servers", "rgw_daemons",
                          "s3"}


def test_roles_get_service_addresses_never_an_ssh_alias(
        make_inventory: InventoryFactory) -> None:
    """A fleet reached through ssh_config aliases: ansible_host names the alias, only the
    controller's ssh resolves it. Health gates and the bucket endpoint must use the service
    address (deploykit_address); no rendered file may carry the alias."""
    import copy

    from tests.conftest import BASE_HOSTS

    hosts = copy.deepcopy(BASE_HOSTS)
    for group in hosts["all"]["children"].values():
        for name, entry in group["hosts"].items():
            entry["deploykit_address"] = entry["ansible_host"]
            entry["ansible_host"] = f"{name}.via-bastion"
    site = open_site(str(make_inventory(hosts)))
    tree = role_tree(site)
    for name, host in site.hosts.items():
        settings = json.loads(tree[name][SETTINGS_PATH].content)
        assert settings["_deploykit_address"] == host.address
        assert host.address.startswith("10.0."), host.address
        for path, rendered in tree[name].items():
            assert "via-bastion" not in rendered.content, f"{name}{path}"
    facts = json.loads(tree["_cluster"][SITE_PATH].content)
    assert facts["gateways"] == ["10.0.0.11", "10.0.0.12"]
    # what a drained gateway host asks before it restarts: service addresses, never aliases
    assert facts["dns_servers"] and all(s.startswith("10.0.") and s.endswith(":53")
                                        for s in facts["dns_servers"]), facts["dns_servers"]


def test_written_run_tree_has_no_key_anywhere(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "golden-secret-not-real"
    monkeypatch.setenv("DK_GOLDEN_ACCESS", "GOLDENACCESSKEY")
    monkeypatch.setenv("DK_GOLDEN_SECRET", secret)
    cases = [p / "inventory" for p in (REPO / "tests" / "golden").iterdir()
             if (p / "inventory").is_dir()]
    for case in cases:
        out = tmp_path / case.parent.name
        assert write_run_tree(open_site(str(case)), out) > 0
        for path in out.rglob("*"):
            if path.is_file():
                assert secret not in path.read_text(), path


@pytest.mark.parametrize("content, bad", [
    ("lmcache_chunk_size: 512\nansible_user: root\n", "lmcache_chunk_size"),
    ('{"vllm_port": 9000}', "vllm_port"),
    ("- a\n- b\n", "--extra-vars"),
    ("key: [unclosed\n", "--extra-vars"),
])
def test_extra_vars_naming_a_setting_are_refused(tmp_path: Path, content: str, bad: str) -> None:
    path = tmp_path / "vars.yml"
    path.write_text(content)
    with pytest.raises(InventoryError) as caught:
        check_extra_vars((path,))
    assert caught.value.problems[0].key == bad
    assert str(path) in str(caught.value)


def test_ansible_knobs_pass_and_run_vars_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "vars.yml"
    path.write_text("ansible_user: root\nansible_ssh_common_args: -o X=1\n")
    check_extra_vars((path,))
    # deploykit's own run variables: an -e after deploykit's would win
    path.write_text("ansible_user: root\ndeploykit_render_dir: /tmp/x\n")
    with pytest.raises(InventoryError, match="deploykit_render_dir"):
        check_extra_vars((path,))


def test_up_refuses_a_setting_in_extra_vars_before_any_host(tmp_path: Path) -> None:
    path = tmp_path / "vars.yml"
    path.write_text("lmcache_chunk_size: 512\n")
    for value in (f"@{path}", "lmcache_chunk_size=512 forks=3",
                  '{"lmcache_chunk_size": 512}'):
        result = run_cli("up", "-i", "example", "-e", value, cwd=REPO)
        assert result.returncode == 3, result.stderr
        assert "lmcache_chunk_size" in result.stderr and "group_vars" in result.stderr
        assert "Traceback" not in result.stderr
    bare = run_cli("up", "-i", "example", "-e", str(path), cwd=REPO)  # Ansible needs the @
    assert bare.returncode == 3 and f"write -e @{path}" in bare.stderr, bare.stderr


def test_playbooks_get_the_inventory_serial_as_a_run_var(
        tmp_path: Path, make_inventory: InventoryFactory) -> None:
    from deploy_kit.flows.converge import playbook_vars

    site = open_site(str(make_inventory(vllm={"vllm_serial": 3})))
    assert playbook_vars(site) == {"vllm_serial": 3}


def _finishes(fn: Callable[[], object], seconds: float = 20) -> object:
    """Run fn in a thread; a read that blocks (a FIFO with no writer) fails the test."""
    import threading

    box: dict[str, object] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # handed back to the test
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "blocked reading a FIFO"
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box.get("value")


@pytest.mark.parametrize("make", ["fifo", "nested"])
def test_extra_vars_files_are_read_bounded(tmp_path: Path, make: str) -> None:
    path = tmp_path / "vars.yml"
    if make == "fifo":
        os.mkfifo(path)
    else:  # 200 levels: past the reader's depth limit, not Python's recursion limit
        path.write_text('{"a": ' * 200 + "1" + "}" * 200 + "\n")
    with pytest.raises(InventoryError) as caught:
        _finishes(lambda: check_extra_vars((path,)))
    assert caught.value.problems[0].key == "--extra-vars"
    assert ("FIFO" if make == "fifo" else "deeper than 48 levels") in str(caught.value)


def test_ca_and_wheelhouse_lock_fifos_are_refused_unread(tmp_path: Path) -> None:
    from deploy_kit.ops.tls import TlsError, load_ca
    from deploy_kit.ops.wheelhouse import LOCK_NAME, lock_digest

    cert, key = tmp_path / "ca.pem", tmp_path / "ca.key"
    os.mkfifo(cert)
    key.write_text("not a key\n")
    key.chmod(0o600)
    with pytest.raises(TlsError, match="FIFO"):
        _finishes(lambda: load_ca(cert, key))
    os.mkfifo(tmp_path / LOCK_NAME)
    assert _finishes(lambda: lock_digest(str(tmp_path))) is None


def test_a_relative_wheel_dir_is_the_inventorys_not_the_working_directorys(
        make_inventory: InventoryFactory, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    root = make_inventory(vllm={"vllm_wheel_dir": "wheels/cpu", "lmcache_wheel_dir": "../w"})
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    site = open_site(str(root))
    host = site.group("vllm")[0]
    assert host.config.vllm_wheel_dir == str(root.resolve() / "wheels" / "cpu")
    assert host.config.lmcache_wheel_dir == str(root.resolve().parent / "w")
    settings = json.loads(role_tree(site)[host.name][SETTINGS_PATH].content)
    assert settings["vllm_wheel_dir"] == str(root.resolve() / "wheels" / "cpu")


CONSUL_1163 = "9d0d7ad123844d43543d285cc0b3e15393d75ffa384bf84e5d64226a7f3d3132"


@pytest.mark.parametrize(("settings", "consul", "coredns"), [
    ({}, f"sha256:{CONSUL_1163}",
     "sha256:https://github.com/coredns/coredns/releases/download/v1.12.1/"
     "coredns_1.12.1_linux_amd64.tgz.sha256"),
    # a version deploykit has no pin for: the release's own checksum file, from the mirror
    ({"consul_version": "1.16.2", "coredns_version": "1.15.0",
      "consul_binary_url": "https://mirror.example/consul/{version}/consul_{version}_linux_amd64.zip",
      "coredns_binary_url": "https://mirror.example/coredns-{version}.tgz"},
     "sha256:https://mirror.example/consul/1.16.2/consul_1.16.2_SHA256SUMS",
     "sha256:https://mirror.example/coredns-1.15.0.tgz.sha256"),
    ({"consul_archive_sha256": "a" * 64, "coredns_binary_checksum": "sha256:" + "b" * 64},
     "sha256:" + "a" * 64, "sha256:" + "b" * 64),
])
def test_every_download_is_checked(make_inventory: InventoryFactory, settings: dict,
                                   consul: str, coredns: str) -> None:
    """The consul and coredns roles hand these to get_url's `checksum`: a pin when there is
    one, else the checksum file published beside the archive, never nothing."""
    site = open_site(str(make_inventory(all=settings)))
    tree = role_tree(site)
    for name in site.hosts:
        derived = json.loads(tree[name][SETTINGS_PATH].content)
        assert derived["_consul_archive_checksum"] == consul
        assert derived["_coredns_archive_checksum"] == coredns


# A scratch copy pip installs from (removed or rewritten on every install), not state a re-run
# must find as it was left.
SCRATCH = frozenset({"/var/cache/deploykit-wheels/"})


def test_the_roles_write_only_paths_the_converge_record_watches() -> None:
    """One source for what a host holds: a role writes either a rendered file (its `dest:`
    the rendered path, watched with the rendered tree) or a path settings.json names (its
    `dest:` reads that name), and runs units whose names settings.json carries. The record
    watches exactly those names (plan/watch.py), so a file or unit a role starts writing
    is watched or this fails; a hand edit of it cannot survive a re-run."""
    import re

    from deploy_kit.plan import watch as watch_lists

    site = open_site(str(REPO / "inventory" / "example"))
    tree = role_tree(site)
    settings = {name: json.loads(files[SETTINGS_PATH].content)
                for name, files in tree.items() if SETTINGS_PATH in files}
    rendered = set().union(*(set(s["_deploykit_files"]) for s in settings.values()))
    tasks = "\n".join(p.read_text() for p in sorted((REPO / "roles").glob("*/tasks/*.yml")))
    handlers = "\n".join(p.read_text() for p in sorted((REPO / "roles").glob("*/handlers/*.yml")))
    literal = set(re.findall(r"^\s+dest: (/[^\s{}]+)$", tasks, re.M))
    assert literal, "no literal dest: left to check (the pattern is stale)"
    assert literal - SCRATCH <= rendered, sorted(literal - SCRATCH - rendered)
    # every other dest: reads a name settings.json carries, and the record watches that name
    watched_names = {n for names in watch_lists.GROUP_PATH_NAMES.values() for n in names}
    named = set(re.findall(r"^\s+dest: \"\{\{ (_[a-z][a-z0-9_]+)", tasks, re.M))
    # the staged model directory: the record watches its marker (_vllm_model_staged_marker_path)
    named.discard("_vllm_model_on_host")
    assert named and named <= watched_names, sorted(named - watched_names)
    # units: every systemd task names its unit through settings (or loops over such names)
    started = re.findall(r"systemd_service:\n\s+name: (.+)$", tasks + handlers, re.M)
    assert started
    unit_names = {n for names in watch_lists.GROUP_UNIT_NAMES.values() for n in names}
    # a vLLM instance's unit is read from its _vllm_instances entry (the loop's item), whose
    # units the record watches under _vllm_instance_units
    instance = {'"{{ item.unit }}"', '"{{ __serving_instance.unit }}"'}
    assert instance & set(started) and "_vllm_instance_units" in unit_names
    for name in started:
        read = set(re.findall(r"\b(_[a-z][a-z0-9_]+_units?)\b", name))
        assert read or name == '"{{ item }}"' or name in instance, \
            f"unit {name} is not named by settings"
        assert read <= unit_names, sorted(read - unit_names)
    # and on each host, the record holds the values of the names its groups write
    for host_name, host in site.hosts.items():
        watch = settings[host_name]["_deploykit_converged"]
        groups = set(host.groups) | ({"consul"} if host.groups & watch_lists.CONSUL_HOSTS
                                       else set())
        for group in groups & watch_lists.GROUP_PATH_NAMES.keys():
            for name in watch_lists.GROUP_PATH_NAMES[group]:
                value = settings[host_name][name]
                values = [value] if isinstance(value, str) else [] if value is None else [
                    v["path"] if isinstance(v, dict) else v for v in value.values()]
                assert set(values) <= set(watch["paths"]), (host_name, name)
        for group in groups & watch_lists.GROUP_UNIT_NAMES.keys():
            for name in watch_lists.GROUP_UNIT_NAMES[group]:
                value = settings[host_name][name]
                values = [value] if isinstance(value, str) else list(value.values())
                assert set(values) <= set(watch["units"]), (host_name, name)
    serving = settings["gaudi3-1"]["_deploykit_converged"]["paths"]
    for path in ("/etc/deploykit/aws/credentials", "/etc/deploykit/lmcache.yaml",
                 "/etc/deploykit/vllm.env", "/etc/deploykit/serving-env.lock-sha256"):
        assert path in serving, path
    assert any(p.endswith("/.deploykit-wheelhouse") for p in serving)
    # the example's Gaudi3 host: in-process, four instances on 8 devices at TP 2; its H100
    # hosts run the LMCache server, which holds the breaker
    assert settings["gaudi3-1"]["_deploykit_converged"]["breaker_units"] == [
        "vllm", "vllm-1", "vllm-2", "vllm-3"]
    assert "/etc/deploykit/lmcache-server.env" in \
        settings["gpu-h100-1"]["_deploykit_converged"]["paths"]
    assert settings["gpu-h100-1"]["_deploykit_converged"]["breaker_units"] == [
        "lmcache-server"]
    assert settings["ceph-adm1"]["_deploykit_converged"]["probes"]
    assert not settings["rgw1"]["_deploykit_converged"]["probes"]
    assert "/etc/ceph/ceph.client.rgw.rgw1.0.keyring" in \
        settings["rgw1"]["_deploykit_converged"]["paths"]
    assert {"consul", "haproxy"} <= set(settings["rgw1"]["_deploykit_converged"]["units"])


@pytest.mark.parametrize(("settings", "archive", "binary"), [
    ({"coredns_archive_sha256": "a" * 64, "coredns_binary_sha256": "b" * 64},
     "sha256:" + "a" * 64, "b" * 64),
    # the older single knob: the archive's pin when downloading ...
    ({"coredns_binary_checksum": "sha256:" + "c" * 64}, "sha256:" + "c" * 64, ""),
    # ... and the controller binary's when one is given
    ({"coredns_binary_checksum": "c" * 64, "coredns_binary_src": "/srv/coredns"},
     "sha256:https://github.com/coredns/coredns/releases/download/v1.12.1/"
     "coredns_1.12.1_linux_amd64.tgz.sha256", "c" * 64),
])
def test_coredns_has_consuls_two_pins(make_inventory: InventoryFactory, settings: dict,
                                      archive: str, binary: str, tmp_path: Path) -> None:
    if "coredns_binary_src" in settings:  # validate refuses a binary that is not there
        binary_src = tmp_path / "srv" / "coredns"
        binary_src.parent.mkdir()
        binary_src.write_bytes(b"\x7fELF")
        binary_src.chmod(0o755)
        settings = {**settings, "coredns_binary_src": str(binary_src)}
    site = open_site(str(make_inventory(all=settings)))
    derived = json.loads(role_tree(site)["dns1"]["/.deploykit/settings.json"].content)
    assert derived["_coredns_archive_checksum"] == archive
    assert derived["_coredns_binary_sha256"] == binary


def test_the_code_digest_and_role_inputs_are_rendered_once_per_site(tmp_path: Path) -> None:
    """The inputs lookup reads these from the site-wide tree instead of walking the code
    and parsing every argument spec once per host."""
    import shutil

    from deploy_kit.ops.inputs import INPUTS_PATH, code_inputs
    from deploy_kit.ops.rundir import role_tree
    from deploy_kit.render.files import CLUSTER
    from tests.conftest import REPO

    facts = json.loads(role_tree(open_site(str(REPO / "inventory" / "example")))
                       [CLUSTER][INPUTS_PATH].content)
    assert {"vllm_api_key", "consul_gossip_key"} <= set(facts["role_options"])
    # a setting is digested with the host's settings.json, not read again as a variable
    assert not {"coredns_ready_port", "_deploykit_files"} & set(facts["role_options"])
    # run-scoped: the render directory is new on every run
    assert not {"deploykit_render_dir", "deploykit_full"} & set(facts["role_options"])
    for part in ("roles", "playbooks", "plugins"):
        shutil.copytree(REPO / part, tmp_path / part,
                        ignore=shutil.ignore_patterns("__pycache__"))
    assert code_inputs(tmp_path) == facts
    handlers = tmp_path / "roles" / "coredns" / "handlers" / "main.yml"
    handlers.write_text(handlers.read_text() + "# edited\n")
    assert code_inputs(tmp_path)["code_digest"] != facts["code_digest"]
