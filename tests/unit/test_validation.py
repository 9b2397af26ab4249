"""Every rule: one inventory that passes and one that fails, with the message checked."""

import copy

import pytest

from deploy_kit.core.errors import InventoryError, Problem
from deploy_kit.ops.site import open_site
from tests.conftest import BASE_HOSTS, InventoryFactory


def problems(make_inventory: InventoryFactory, hosts: dict | None = None,
             **group_vars: dict) -> list[Problem]:
    try:
        open_site(str(make_inventory(hosts, **group_vars)))
    except InventoryError as exc:
        return exc.problems
    return []


def keys(found: list[Problem]) -> set[str]:
    return {p.key for p in found}


def test_base_inventory_is_valid(make_inventory: InventoryFactory) -> None:
    assert problems(make_inventory) == []


CPU = {"vllm_accelerator": "cpu", "vllm_version": "0.32.0", "lmcache_topology": "server"}


@pytest.mark.parametrize(("group_vars", "key", "text"), [
    ({"vllm": {"vllm_model": "/srv/models/none"}}, "vllm_model", "cannot use"),
    ({"vllm": {"vllm_model": "/srv/models/../etc"}}, "vllm_model", "not an absolute, normalised"),
    ({"vllm": {"lmcache_chunk_size": 250}}, "lmcache_chunk_size", "not a multiple"),
    ({"vllm": {"vllm_block_size": 32, "lmcache_chunk_size": 48}}, "lmcache_chunk_size",
     "block size 32"),
    ({"vllm": {"lmcache_save_unfull_chunk": True}}, "lmcache_save_unfull_chunk", "true with"),
    ({"vllm": {"vllm_kv_connector": "LMCacheConnectorv1"}}, "vllm_kv_connector",
     "not an LMCache connector"),
    ({"vllm": {"vllm_kv_transfer_extra": {"kv_parallel_size": 16}}},
     "vllm_kv_transfer_extra.kv_parallel_size", "rejects this field"),
    ({"vllm": {"lmcache_extra_config": {"s3_max_inflight_reqs": 64}}},
     "lmcache_extra_config.s3_max_inflight_reqs", "no longer reads"),
    ({"vllm": {"lmcache_extra_config": {"s3_regoin": "x"}}},
     "lmcache_extra_config.s3_regoin", "not an S3 key"),
    ({"vllm": {"lmcache_extra_config": {"save_chunk_meta": True}}},
     "lmcache_extra_config.save_chunk_meta", "must be false"),
    ({"vllm": {"lmcache_mode": "nixl", "lmcache_nixl_buffer_device": "cuda",
               "lmcache_nixl_backend": "GDS", "lmcache_nixl_buffer_size": 1000}},
     "lmcache_nixl_buffer_size",
     "not a multiple of the chunk object size"),
    ({"vllm": {"lmcache_mode": "nixl", "lmcache_nixl_buffer_size": 1 << 30}},
     "lmcache_nixl_buffer_size", "must not be set"),
    ({"vllm": {"lmcache_mode": "nixl", "lmcache_max_local_cpu_size": 0}},
     "lmcache_max_local_cpu_size", "stages every transfer in LMCache's CPU pool"),
    ({"ceph_admin": {"ceph_rgw_pools_list": [{"name": "p", "pg_num": 100}]}},
     "ceph_rgw_pools_list[p].pg_num", "not a power of two"),
    ({"ceph_admin": {"ceph_rgw_pools_list": [{"name": "p", "pg_num": 64, "size": 2,
                                              "min_size": 3}]}},
     "ceph_rgw_pools_list[p].min_size", "> size"),
    ({"consul_servers": {"consul_bootstrap_expect": 3}}, "consul_bootstrap_expect",
     "> 1 hosts"),
    ({"rgw": {"ceph_rgw_count_per_host": 8, "ceph_rgw_host_cpus": 4}},
     "ceph_rgw_count_per_host", "with 4 cores"),
    ({"all": {"deploykit_s3_access_key": "AKIAINLINE"}}, "deploykit_s3_access_key",
     "secret written inline"),
    ({"vllm": {"lmcache_extra_config": {"aws_secret_access_key": "x"}}},
     "lmcache_extra_config.aws_secret_access_key", "written to lmcache.yaml (0644)"),
    ({"all": {"deploykit_s3_access_key": "{{ vault_deploykit_s3_access_key }}",
              "vault_deploykit_s3_access_key": "AKIA"}}, "vault_deploykit_s3_access_key",
     "secret written inline (reached from deploykit_s3_access_key"),
    ({"all": {"lmcache_version": "0.2.0"}}, "lmcache_version", "not supported"),
    ({"all": {"deploykit_s3_fqdn": "localhost"}}, "deploykit_s3_fqdn", "not a fully qualified"),
    ({"vllm": {"vllm_model": "acme/secret-model"}}, "vllm_model", "no built-in KV geometry"),
    ({"vllm": {"lmcache_mode": "nixl", "lmcache_version": "0.3.10"}}, "lmcache_mode",
     "no NIXL storage"),
    ({"all": {"vllm_tensor_parallel_size": "two"}}, "vllm_tensor_parallel_size",
     "not a plain number"),
    ({"all": {"lmcache_mode": "redis"}}, "lmcache_mode", "Input should be"),
    ({"all": {"lmcache_chunksize": 256}}, "lmcache_chunksize", "unknown key"),
    ({"all": {"deploykit_s3_port": 8081}}, "deploykit_s3_port",
     "also used by ceph_rgw_frontend_port"),
    ({"all": {"coredns_health_port": 53}}, "coredns_health_port", "also used by coredns_port"),
    ({"rgw": {"deploykit_ceph_fsid": "1b2c3d4e-0000-4000-8000-000000000000",
              "ceph_rgw_mode": "packages"}}, "deploykit_ceph_mon_host", "required with"),
])
def test_rule_fails(make_inventory: InventoryFactory, group_vars: dict, key: str,
                    text: str) -> None:
    found = problems(make_inventory, **group_vars)
    matching = [p for p in found if p.key == key]
    assert matching, f"expected a problem on {key}, got {found}"
    assert text in matching[0].message


@pytest.mark.parametrize("group_vars", [
    {"vllm": {"lmcache_topology": "server"}},  # GPUs may run the server topology too
    {"vllm": {"lmcache_chunk_size": 512}},
    {"vllm": {"vllm_block_size": 32, "lmcache_chunk_size": 256}},
    {"vllm": {"lmcache_mode": "dram", "lmcache_save_unfull_chunk": True}},
    {"vllm": {"vllm_kv_transfer_extra": {"kv_connector_extra_config": {"x": 1}}}},
    # a key deploykit does not render passes through; the ones it renders are settings
    # (rules_passthrough refuses them in lmcache_extra_config)
    {"vllm": {"lmcache_extra_config": {"x_site_tag": "a"},
              "lmcache_s3_num_io_threads": 32}},
    {"vllm": {"lmcache_version": "0.3.10", "lmcache_s3_max_inflight_reqs": 32}},
    # GDS registers VRAM (OBJ does not: rules_lmcache nixl_buffer_aligned)
    {"vllm": {"lmcache_mode": "nixl", "lmcache_nixl_buffer_device": "cuda",
              "lmcache_nixl_backend": "GDS", "lmcache_nixl_buffer_size": 33554432 * 4}},
    {"ceph_admin": {"ceph_rgw_pools_list": [{"name": "p", "pg_num": 128, "size": 3,
                                             "min_size": 2}]}},
    {"rgw": {"ceph_rgw_count_per_host": 4, "ceph_rgw_host_cpus": 4}},
    {"all": {"deploykit_s3_access_key": "{{ vault_deploykit_s3_access_key }}"}},  # locked
])
def test_rule_passes(make_inventory: InventoryFactory, group_vars: dict) -> None:
    assert problems(make_inventory, **group_vars) == []


def test_secret_in_unencrypted_vault_file_refused(make_inventory: InventoryFactory) -> None:
    root = make_inventory(files={"group_vars/all/vault.yml": "deploykit_s3_secret_key: x\n"})
    with pytest.raises(InventoryError, match=r"not vault-encrypted .* ansible-vault encrypt"):
        open_site(str(root))


def test_sharing_hosts_must_agree(make_inventory: InventoryFactory) -> None:
    hosts = copy.deepcopy(BASE_HOSTS)
    vllm_hosts = hosts["all"]["children"]["vllm"]["hosts"]
    vllm_hosts["gpu3"] = {"vllm_accelerator": "cuda"}
    vllm_hosts["gpu2"]["vllm_python_hash_seed"] = 68
    vllm_hosts["gpu2"]["vllm_tensor_parallel_size"] = 2
    found = problems(make_inventory, hosts)
    seed = [p for p in found if p.key == "vllm_python_hash_seed"]
    assert len(seed) == 1 and "gpu2 has 68, others have 67" in seed[0].message
    assert "vllm_tensor_parallel_size" in keys(found)


def test_missing_groups_and_accelerator(make_inventory: InventoryFactory) -> None:
    hosts = copy.deepcopy(BASE_HOSTS)
    del hosts["all"]["children"]["dns"]
    del hosts["all"]["children"]["vllm"]["hosts"]["gpu1"]["vllm_accelerator"]
    found = problems(make_inventory, hosts)
    assert {"dns", "vllm_accelerator"} <= keys(found)


def test_every_problem_reported_in_one_pass(make_inventory: InventoryFactory) -> None:
    found = problems(make_inventory, vllm={"lmcache_chunk_size": 250,
                                           "lmcache_save_unfull_chunk": True},
                     consul_servers={"consul_bootstrap_expect": 5},
                     all={"deploykit_s3_secret_key": "inline", "lmcache_chunksize": 1})
    assert {"lmcache_chunk_size", "lmcache_save_unfull_chunk", "consul_bootstrap_expect",
            "deploykit_s3_secret_key", "lmcache_chunksize"} <= keys(found)
    for p in found:  # each names the file, the key and a fix
        line = str(p)
        assert line.startswith(p.file) and f": {p.key}: " in line and " — " in line


def test_coredns_checksum_must_be_a_sha256(make_inventory: InventoryFactory) -> None:
    root = make_inventory(dns={"coredns_binary_checksum": "md5:abc"})
    with pytest.raises(InventoryError, match="coredns_binary_checksum"):
        open_site(str(root))
    ok = make_inventory(dns={"coredns_binary_checksum": "sha256:" + "a" * 64})
    assert open_site(str(ok)).hosts["dns1"].config.coredns_binary_checksum.endswith("a" * 64)


def cpu_hosts() -> dict:
    """BASE_HOSTS with every serving host on CPU cores (host vars beat group vars)."""
    hosts = copy.deepcopy(BASE_HOSTS)
    for host in hosts["all"]["children"]["vllm"]["hosts"].values():
        host["vllm_accelerator"] = "cpu"
    return hosts


@pytest.mark.parametrize(("group_vars", "key", "text"), [
    ({**CPU, "lmcache_topology": "inprocess"}, "lmcache_topology", "silently recomputes"),
    ({**CPU, "vllm_version": "0.33.0"}, "vllm_version", "has no cpu build"),
    ({**CPU, "vllm_block_size": 16, "lmcache_chunk_size": 256}, "vllm_block_size",
     "multiple of 32"),
    ({**CPU, "lmcache_mode": "nixl"}, "lmcache_mode", "per-process pool keys"),
    ({**CPU, "vllm_kv_connector": "LMCacheConnectorV1"}, "vllm_kv_connector",
     "does not talk to lmcache_topology server"),
    ({**CPU, "lmcache_server_http_port": 8000}, "lmcache_server_http_port",
     "also used by vllm_port"),
])
def test_cpu_rule_fails(make_inventory: InventoryFactory, group_vars: dict, key: str,
                        text: str) -> None:
    found = problems(make_inventory, cpu_hosts(), vllm=group_vars)
    matching = [p for p in found if p.key == key]
    assert matching, f"expected a problem on {key}, got {found}"
    assert text in matching[0].message
    assert matching[0].fix


@pytest.mark.parametrize("group_vars", [
    CPU, {**CPU, "vllm_block_size": 64, "lmcache_chunk_size": 256},
    {**CPU, "lmcache_mode": "dram"}])
def test_cpu_rule_passes(make_inventory: InventoryFactory, group_vars: dict) -> None:
    assert problems(make_inventory, cpu_hosts(), vllm=group_vars) == []


def test_gpu_host_on_a_vllm_without_its_build_is_refused(
        make_inventory: InventoryFactory) -> None:
    found = problems(make_inventory, vllm={"vllm_version": "0.32.0"})  # cuda and cpu only
    assert any(p.key == "vllm_version" and "has no rocm build" in p.message and
               p.hosts == ("gpu2",) for p in found)


def test_every_number_a_setting_takes_is_bounded_both_ways() -> None:
    """One mechanism for numbers: no numeric setting renders without a bound (an
    absurd size or count is refused at validate), and NaN/infinity pass no range check."""
    from annotated_types import Ge, Gt, Le, Lt

    from deploy_kit.config.models import HostConfig, PoolSpec

    for model in (HostConfig, PoolSpec):
        assert model.model_config.get("allow_inf_nan") is False, model
        for name, info in model.model_fields.items():
            if info.annotation not in (int, float, int | None, float | None):
                continue
            kinds = {type(m) for m in info.metadata}
            assert kinds & {Ge, Gt} and kinds & {Le, Lt}, f"{model.__name__}.{name} is unbounded"


@pytest.mark.parametrize("value", ["plain", "two words", '"quoted"', "back\\slash", "$HOME",
                                   "`id`", "it's", '{"json": [1, 2]}', ""])
def test_env_file_values_reach_the_service_byte_for_byte(value: str) -> None:
    """What systemd reads from an EnvironmentFile line (its documented rules: outside quotes
    a backslash escapes one character; inside double quotes only \\ " $ ` are escapes)."""
    from deploy_kit.render.templating import env_quote

    quoted = env_quote(value)
    if quoted.startswith('"'):
        body, out, i = quoted[1:-1], "", 0
        while i < len(body):
            if body[i] == "\\" and body[i + 1] in '\\"$`':
                out, i = out + body[i + 1], i + 2
            else:
                assert body[i] not in '"', quoted  # an unescaped quote would end the value
                out, i = out + body[i], i + 1
        assert out == value
    else:
        assert quoted == value and not set(value) & set("\\\"'$` #;")
