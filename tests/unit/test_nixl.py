"""lmcache_mode nixl: the OBJ parameters rendered for NIXL 1.5 (checksums, the CA bundle its
bundled curl cannot find by itself), what gets installed, and how the round trip judges
NIXL's object names."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any
from urllib.parse import quote

import pytest
import yaml

from deploy_kit.config.site import Host
from deploy_kit.ops.site import open_site
from deploy_kit.plan.serving import lmcache_packages
from deploy_kit.render.files import render_site
from deploy_kit.render.tls import SYSTEM_BUNDLE
from deploy_kit.verify.model import Status
from deploy_kit.verify.roundtrip import RoundTripError, _as_store, _names_finding, nixl_object_name
from deploy_kit.verify.roundtrip import roundtrip as run_roundtrip
from tests.conftest import InventoryFactory

NIXL = {"lmcache_mode": "nixl"}
TLS = {"deploykit_s3_tls": True, "deploykit_s3_port": 443, "deploykit_s3_fqdn": "s3.t.test"}


def _params(make_inventory: InventoryFactory, **all_vars: Any) -> dict[str, str]:
    tree = render_site(open_site(str(make_inventory(all=all_vars, vllm=NIXL))))
    lm = yaml.safe_load(tree["gpu1"]["/etc/deploykit/lmcache.yaml"].content)
    assert lm["extra_config"]["enable_nixl_storage"] is True
    assert lm["extra_config"]["nixl_pool_size"] == 0  # dynamic: content-addressed objects
    params: dict[str, str] = lm["extra_config"]["nixl_backend_params"]
    assert all(isinstance(v, str) for v in params.values())  # NIXL's map is string-valued
    return params


def test_plain_http_params_ask_checksums_only_where_required(
        make_inventory: InventoryFactory) -> None:
    params = _params(make_inventory)
    assert params["scheme"] == "http" and params["endpoint_override"].startswith("http://")
    assert params["req_checksum"] == params["resp_checksum"] == "required"
    assert "ca_bundle" not in params


def test_tls_params_name_the_system_bundle(make_inventory: InventoryFactory) -> None:
    params = _params(make_inventory, **TLS)
    assert params["endpoint_override"] == "https://s3.t.test" and params["scheme"] == "https"
    assert params["ca_bundle"] == SYSTEM_BUNDLE == "/etc/ssl/certs/ca-certificates.crt"


def test_a_rhel_fleet_names_its_own_bundle(make_inventory: InventoryFactory) -> None:
    params = _params(make_inventory, **TLS,
                     lmcache_nixl_ca_bundle="/etc/pki/tls/certs/ca-bundle.crt")
    assert params["ca_bundle"] == "/etc/pki/tls/certs/ca-bundle.crt"


def test_nixl_hosts_install_the_extra_and_the_pinned_nixl(
        make_inventory: InventoryFactory) -> None:
    site = open_site(str(make_inventory(vllm=NIXL)))
    assert lmcache_packages(site.hosts["gpu1"].config) == ["lmcache[nixl]==0.5.6",
                                                           "nixl==1.4.1"]
    plain = open_site(str(make_inventory(vllm={})))
    assert lmcache_packages(plain.hosts["gpu1"].config) == ["lmcache==0.5.6"]


def _host(make_inventory: InventoryFactory, **vllm: Any) -> Host:
    return open_site(str(make_inventory(vllm=vllm))).hosts["gpu1"]


def _key(model: str, n: int) -> str:
    return f"{model}@1@0@{n:x}@bfloat16"


def test_nixl_object_names_follow_lmcache_and_a_wrong_name_fails(
        make_inventory: InventoryFactory) -> None:
    host = _host(make_inventory, **NIXL)
    keys = [_key(host.config.vllm_model, n) for n in (0xabc, 0xdef)]
    good = {"keys": keys, "objects": [nixl_object_name(k) for k in keys]}
    finding = _names_finding(host, good)
    assert finding.status is Status.PASS
    assert "/" not in good["objects"][0] and "@" not in good["objects"][0]
    assert good["objects"][0] == quote(keys[0].replace("/", "_").replace("@", "_"), safe="")
    slash = {"keys": keys, "objects": [k.replace("@", "_") for k in keys]}  # '/' kept
    assert _names_finding(host, slash).status is Status.FAIL
    assert _names_finding(host, {"keys": [], "objects": []}).status is Status.FAIL


def test_s3_object_names_keep_the_key_layout(make_inventory: InventoryFactory) -> None:
    host = _host(make_inventory)
    keys = [_key(host.config.vllm_model, 7)]
    assert _names_finding(host, {"keys": keys}).status is Status.PASS
    assert _names_finding(host, {"keys": ["other@1@0@7@bfloat16"]}).status is Status.FAIL


def test_a_forced_store_changes_only_the_mode(make_inventory: InventoryFactory) -> None:
    host = _host(make_inventory)
    forced = _as_store(host, "nixl")
    assert forced.config.lmcache_mode == "nixl" and host.config.lmcache_mode == "s3"
    assert replace(forced, config=host.config) == host
    assert _as_store(host, None) is host and _as_store(host, "s3") is host


def test_an_unknown_store_is_refused_before_any_host(make_inventory: InventoryFactory) -> None:
    site = open_site(str(make_inventory()))
    with pytest.raises(RoundTripError, match="no round trip for store 'dram'"):
        run_roundtrip(site, store="dram")


def _fake_driver(stored: int, hits: int) -> tuple[list[str], Any]:
    """A LocalDriver that answers like the NIXL driver, and records which driver ran."""
    ran: list[str] = []

    def driver(host: Host, deployed: Any, env: dict[str, str], text: str,
               args: list[str]) -> str:
        ran.append(f"{host.name}:{args[0]}:{'NixlStorageBackend' in text}:"
                   f"{env.get('PYTHONHASHSEED', '-')}")
        keys = [_key(host.config.vllm_model, n) for n in (1, 2)]
        if args[0] == "store":
            result: dict[str, Any] = {"keys": keys, "exists": [i < stored for i in range(2)],
                                      "objects": [nixl_object_name(k) for k in keys],
                                      "chunk_bytes": 2097152}
        elif "PYTHONHASHSEED" in env:  # another seed: other keys, no hits
            result = {"keys": keys, "hits": 0, "identical": []}
        else:
            result = {"keys": keys, "hits": hits, "identical": [True] * hits}
        return "NIXL INFO noise\n" + json.dumps(result)

    return ran, driver


@pytest.mark.parametrize(("stored", "hits", "status", "text"), [
    (2, 2, Status.PASS, "through NIXL OBJ at http://"),
    (0, 0, Status.FAIL, "stored 0/2 (LMCache only logs a failed put); gpu2 hit 0/2"),
    (2, 1, Status.FAIL, "gpu2 hit 1/2")])
def test_forced_nixl_round_trip_runs_the_nixl_driver_and_judges_it(
        make_inventory: InventoryFactory, monkeypatch: pytest.MonkeyPatch, stored: int,
        hits: int, status: Status, text: str) -> None:
    import deploy_kit.verify.roundtrip as rt

    site = open_site(str(make_inventory()))  # two serving hosts: gpu1, gpu2
    monkeypatch.setattr(rt, "_read", lambda site, host, render=False: rt.HostFiles(
        env={}, files={}, resolv=""))
    ran, driver = _fake_driver(stored, hits)
    findings = {f.check: f for f in run_roundtrip(site, driver, store="nixl")}
    trip = findings["lmcache-roundtrip"]
    assert trip.status is status and text in trip.message, trip.message
    seed = site.hosts["gpu2"].config.vllm_python_hash_seed
    assert ran == ["gpu1:store:True:-", "gpu2:fetch:True:-", f"gpu2:fetch:True:{seed + 1}"]
    assert findings["lmcache-seed-mismatch"].status is Status.PASS


def test_a_driver_that_cannot_load_the_obj_plugin_says_why(
        make_inventory: InventoryFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    import deploy_kit.verify.roundtrip as rt

    site = open_site(str(make_inventory()))
    monkeypatch.setattr(rt, "_read", lambda site, host, render=False: rt.HostFiles(
        env={}, files={}, resolv=""))
    log = ("E1203 nixl_agent.cpp:334] createBackend: unsupported backend 'OBJ'\n"
           "nixl_cu13._bindings.nixlNotFoundError: NIXL_ERR_NOT_FOUND\n")
    with pytest.raises(RoundTripError, match=r"libcuobjclient\.so\.1; pin nixl 1\.4\.1"):
        run_roundtrip(site, lambda *_: log, store="nixl")
