"""The router group: vllm-router units with every instance as a backend, its front, the
routers' name, vLLM's KV events, the serving fronts' router-only /v1, and the rules."""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess

import pytest

from deploy_kit.config.instances import instances
from deploy_kit.core.errors import InventoryError
from deploy_kit.ops.site import open_site
from deploy_kit.render.files import render_site
from deploy_kit.render.serving_front import instance_tag
from tests.conftest import CPU_TWO_INSTANCES, REPO, InventoryFactory


def _routed(extra_router_vars: dict | None = None, **vllm_vars: object) -> dict:
    hosts = copy.deepcopy(CPU_TWO_INSTANCES)
    children = hosts["all"]["children"]
    children["vllm"]["hosts"]["cpu2"] = {"ansible_host": "10.0.1.2"}
    children["vllm"]["vars"].update(vllm_vars)
    children["router"] = {"hosts": {"r1": {"ansible_host": "10.0.2.1"},
                                    "r2": {"ansible_host": "10.0.2.2"}},
                          "vars": extra_router_vars or {}}
    return hosts


def _problems(root: object) -> list[str]:
    with pytest.raises(InventoryError) as err:
        open_site(str(root))
    return [str(p) for p in err.value.problems]


def _argv(unit: str) -> list[str]:
    line = unit.split("ExecStart=", 1)[1].split("\nExecStartPost", 1)[0]
    return line.replace("\\\n", " ").split()


def test_the_example_routes_every_instance_and_publishes_kv_events() -> None:
    site = open_site(str(REPO / "inventory" / "example"))
    tree = render_site(site)
    expected = sorted(f"http://{h.address}:{i.port}" for h in site.group("vllm")
                      for i in instances(h.name, h.config))
    assert len(expected) == 16  # 4 hosts x 4 instances
    for router in ("router1", "router2"):
        argv = _argv(tree[router]["/etc/systemd/system/vllm-router.service"].content)
        urls = argv[argv.index("--worker-urls") + 1:argv.index("--policy")]
        assert sorted(urls) == expected
        assert argv[argv.index("--policy") + 1] == "cache_aware"
        assert argv[argv.index("--host") + 1] == "127.0.0.1"
        assert "--api-key" not in argv  # the key comes from the 0600 env file
        service = json.loads(tree[router]["/etc/consul.d/llm-service.json"].content)
        assert service["service"]["name"] == "llm"
        assert tree[router]["/etc/deploykit-router/secret.env"].mode == 0o600
    for host in site.group("vllm"):
        for i in instances(host.name, host.config):
            unit = tree[host.name][f"/etc/systemd/system/{i.unit}.service"].content
            events = json.loads(re.search(r"--kv-events-config '(\{.*?\})'", unit)[1])
            assert events["endpoint"] == f"tcp://127.0.0.1:{15557 + i.index}"
            assert events["topic"] == f"kv@{host.address}:{i.port}@Qwen/Qwen3-32B"
    corefile = tree["dns1"]["/etc/coredns/Corefile"].content
    assert "rewrite stop name exact llm.cephlab.com. llm.service.consul. answer auto" in corefile


@pytest.mark.skipif(shutil.which("haproxy") is None, reason="haproxy not installed")
def test_both_fronts_parse_and_the_serving_front_serves_v1_to_routers_only(tmp_path) -> None:
    site = open_site(str(REPO / "inventory" / "example"))
    tree = render_site(site)
    serving = tree["gpu-h100-1"]["/etc/haproxy/vllm-front.cfg"].content
    assert "acl direct src 127.0.0.1 ::1 10.67.68.51 10.67.68.52 10.67.68.41" in serving
    assert "tcp-request connection reject unless { src 10.67.68.51 10.67.68.52 }" in serving
    assert f"X-Deploykit-Instance {instance_tag('gpu-h100-1/3')}" in serving
    # the render endpoints answer 404, so the router tokenizes a text prompt through
    # /tokenize (vLLM 0.32's own answer, 403, stops it)
    assert "acl render path_reg ^/v1/(chat/)?completions/render$" in serving
    assert "http-request deny deny_status 404 if render" in serving
    front = tree["router1"]["/etc/haproxy/vllm-router-front.cfg"].content
    assert "http-request deny deny_status 401 if api !key" in front
    for name, text in (("serving", serving), ("router", front)):
        # the keys file and the chroot exist only on a host: point them at empty stand-ins
        cfg = tmp_path / f"{name}.cfg"
        cfg.write_text(re.sub(r"-f /etc/haproxy/\S+\.keys", "-f /dev/null", text)
                       .replace("chroot /var/lib/haproxy", f"chroot {tmp_path}"))
        result = subprocess.run(["haproxy", "-c", "-f", str(cfg)], capture_output=True,
                                text=True, check=False)
        assert result.returncode == 0, result.stderr
        assert "WARNING" not in result.stderr, result.stderr


def test_a_site_without_routers_renders_as_before(make_inventory: InventoryFactory) -> None:
    site = open_site(str(make_inventory(CPU_TWO_INSTANCES)))
    tree = render_site(site)
    assert "--kv-events-config" not in tree["cpu1"]["/etc/systemd/system/vllm.service"].content
    front = tree["cpu1"]["/etc/haproxy/vllm-front.cfg"].content
    assert "acl direct" not in front and "kv_events" not in front
    assert "llm" not in tree["dns1"]["/etc/coredns/Corefile"].content


def test_kvaware_gives_the_router_every_event_source(make_inventory: InventoryFactory) -> None:
    site = open_site(str(make_inventory(_routed({"router_routing_logic": "kvaware"}))))
    argv = _argv(render_site(site)["r1"]["/etc/systemd/system/vllm-router.service"].content)
    sources = [argv[i + 1] for i, w in enumerate(argv) if w == "--kv-event-source"]
    assert sources == ["http://10.0.1.1:8000=tcp://10.0.1.1:5557",
                       "http://10.0.1.1:8001=tcp://10.0.1.1:5558",
                       "http://10.0.1.2:8000=tcp://10.0.1.2:5557"]
    # the backends' own block size (CPU's default)
    assert argv[argv.index("--kv-event-block-size") + 1] == str(site.hosts["cpu1"].block_size)


def test_a_router_group_with_no_serving_hosts_is_refused(
        make_inventory: InventoryFactory) -> None:
    hosts = _routed()
    hosts["all"]["children"]["vllm"]["hosts"] = {}
    assert any("router: the router group has hosts but the site has no vllm hosts" in p
               for p in _problems(make_inventory(hosts)))


def test_backends_that_disagree_on_block_size_or_seed_are_refused(
        make_inventory: InventoryFactory) -> None:
    hosts = _routed()
    hosts["all"]["children"]["vllm"]["hosts"]["cpu2"] |= {"vllm_block_size": 32,
                                                          "vllm_python_hash_seed": 5}
    problems = _problems(make_inventory(hosts))
    assert any("vllm_block_size: block size 32 differs from the other backends' 128" in p
               for p in problems), problems
    assert any("vllm_python_hash_seed: cpu2 has 5, others have 67" in p for p in problems)


def test_backends_serving_two_models_are_refused(make_inventory: InventoryFactory) -> None:
    hosts = _routed()
    hosts["all"]["children"]["vllm"]["hosts"]["cpu2"]["vllm_model"] = "Qwen/Qwen3-4B"
    assert any("served model name Qwen/Qwen3-4B differs from the other backends' "
               "Qwen/Qwen3-8B" in p for p in _problems(make_inventory(hosts)))


def test_a_block_size_the_router_does_not_share_is_refused(
        make_inventory: InventoryFactory) -> None:
    root = make_inventory(_routed({"router_extra_args": ["--kv-event-block-size", "64"]}))
    assert any("--kv-event-block-size 64 is not the backends' block size 128" in p
               for p in _problems(root))
    root = make_inventory(_routed({"router_extra_args": ["--worker-urls", "http://x:1"]}))
    assert any("--worker-urls is deploykit's to set" in p for p in _problems(root))


def test_kvaware_needs_events_and_the_prefix_cache(make_inventory: InventoryFactory) -> None:
    root = make_inventory(_routed({"router_routing_logic": "kvaware"},
                                  vllm_kv_events=False, vllm_enable_prefix_caching=False))
    problems = _problems(root)
    assert any("vllm_kv_events: false, but router_routing_logic kvaware" in p
               for p in problems), problems
    assert any("vllm_enable_prefix_caching: false" in p for p in problems)


@pytest.mark.parametrize(("key", "value", "clash"), [
    ("router_port", 8000, "vllm_port"),
    ("router_metrics_port", 8301, "Consul's serf LAN port"),
])
def test_a_router_port_that_collides_is_refused(make_inventory: InventoryFactory, key: str,
                                                value: int, clash: str) -> None:
    hosts = _routed()
    # r1 also serves: its router port meets the instances' ports
    hosts["all"]["children"]["vllm"]["hosts"]["r1"] = {"ansible_host": "10.0.2.1"}
    hosts["all"]["children"]["router"]["hosts"]["r1"][key] = value
    problems = _problems(make_inventory(hosts))
    assert any(f"{key}: port {value} is also used by {clash}" in p or
               (f"port {value} is also used by {key}" in p and clash in p)
               for p in problems), problems
