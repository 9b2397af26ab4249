"""The chunk-key hash: cryptographic by default, top level in lmcache.yaml, on the server's
command line, one value per bucket, refused where the pinned LMCache cannot key by it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from deploy_kit.core.errors import InventoryError
from deploy_kit.ops.site import open_site
from deploy_kit.render import lmcache_server
from deploy_kit.render.files import render_site
from deploy_kit.render.lmcache import OWNED_TOP_LEVEL_KEYS, build_lmcache_config
from tests.conftest import BASE_HOSTS, CPU_TWO_INSTANCES, REPO, InventoryFactory


def _problems(root: object) -> list[str]:
    with pytest.raises(InventoryError) as err:
        open_site(str(root))
    return [str(p) for p in err.value.problems]


def test_the_example_renders_sha256_cbor_at_the_top_level() -> None:
    site = open_site(str(REPO / "inventory" / "example"))
    rendered = render_site(site)
    docs = [yaml.safe_load(f.content) for files in rendered.values()
            for path, f in files.items() if path.endswith("/lmcache.yaml")]
    assert docs and all(d["pre_caching_hash_algorithm"] == "sha256_cbor" for d in docs)
    assert all("pre_caching_hash_algorithm" not in d.get("extra_config", {}) for d in docs)
    assert "pre_caching_hash_algorithm" in OWNED_TOP_LEVEL_KEYS


def test_builtin_is_the_explicit_opt_out(make_inventory: InventoryFactory) -> None:
    site = open_site(str(make_inventory(
        all={"lmcache_pre_caching_hash_algorithm": "builtin", "lmcache_topology": "inprocess"})))
    for host in site.group("vllm"):
        assert build_lmcache_config(host.config)["pre_caching_hash_algorithm"] == "builtin"


def test_the_server_hashes_with_the_setting(make_inventory: InventoryFactory) -> None:
    for value, expected in ((None, "sha256_cbor"), ("sha256", "sha256"), ("builtin", "builtin")):
        extra = {} if value is None else {"lmcache_pre_caching_hash_algorithm": value}
        site = open_site(str(make_inventory(CPU_TWO_INSTANCES, all=extra)))
        argv = lmcache_server.server_argv(site.hosts["cpu1"].config)
        assert argv[argv.index("--hash-algorithm") + 1] == expected
        assert lmcache_server.connector_extra(site.hosts["cpu1"].config)[
            "lmcache.mp.hash_algorithm"] == expected


def test_hosts_sharing_the_bucket_must_agree(make_inventory: InventoryFactory) -> None:
    hosts = yaml.safe_load(yaml.safe_dump(BASE_HOSTS))
    hosts["all"]["children"]["vllm"]["hosts"]["gpu2"]["lmcache_pre_caching_hash_algorithm"] = \
        "builtin"
    problems = _problems(make_inventory(hosts))
    hits = [p for p in problems if ": lmcache_pre_caching_hash_algorithm:" in p]
    assert len(hits) == 1 and "gpu2 has 'builtin', others have 'sha256_cbor'" in hits[0]
    assert "hosts.yml" in hits[0]


@pytest.mark.parametrize("value", ["xxhash", "blake3", "SHA256", "", 256])
def test_unknown_names_are_refused(make_inventory: InventoryFactory, value: object) -> None:
    """LMCache falls back to Python's hash, with only a warning, for a name vLLM lacks."""
    problems = _problems(make_inventory(all={"lmcache_pre_caching_hash_algorithm": value}))
    assert any("lmcache_pre_caching_hash_algorithm" in p for p in problems)


def test_lmcache_03_defaults_to_builtin_and_refuses_a_digest(tmp_path: Path) -> None:
    legacy = tmp_path / "legacy"
    shutil.copytree(REPO / "tests" / "golden" / "legacy-versions" / "inventory", legacy)
    site = open_site(str(legacy))  # LMCache 0.3.10: valid as it was, with Python's hash
    assert {h.config.lmcache_pre_caching_hash_algorithm for h in site.group("vllm")} == \
        {"builtin"}
    with (legacy / "group_vars" / "all.yml").open("a") as f:
        f.write("lmcache_pre_caching_hash_algorithm: sha256_cbor\n")
    hits = [p for p in _problems(legacy) if ": lmcache_pre_caching_hash_algorithm:" in p]
    assert hits and "LMCache 0.3.10 cannot key chunks by sha256_cbor" in hits[0]
    assert "pin lmcache_version 0.4 or later" in hits[0] and "all.yml" in hits[0]


def test_the_hash_inside_extra_config_is_refused(make_inventory: InventoryFactory) -> None:
    problems = _problems(make_inventory(all={
        "lmcache_extra_config": {"pre_caching_hash_algorithm": "builtin"}}))
    hits = [p for p in problems if "lmcache_extra_config.pre_caching_hash_algorithm" in p]
    assert hits and "set lmcache_pre_caching_hash_algorithm instead" in hits[0]
