import pytest

from deploy_kit.core import compat


def test_lmcache_05_keys_differ_from_03() -> None:
    new, old = compat.lmcache("0.5.6"), compat.lmcache("0.3.10")
    assert "s3_max_inflight_reqs" in new.s3_dead_keys
    assert "s3_max_inflight_reqs" in old.s3_extra_keys
    assert "disable_tls" in new.s3_extra_keys and "disable_tls" not in old.s3_extra_keys
    assert new.s3_shm_files_per_worker == 0 and old.s3_shm_files_per_worker == 64


def test_vllm_033_drops_kv_parallel_size_and_rope_flag() -> None:
    v33, v10 = compat.vllm("0.33.0"), compat.vllm("0.10.2")
    assert "kv_parallel_size" not in v33.kv_transfer_fields
    assert "kv_parallel_size" in v10.kv_transfer_fields
    assert v33.rope_scaling_flag is None and v10.rope_scaling_flag == "--rope-scaling"
    assert v33.default_block_size["gaudi3"] == 128


@pytest.mark.parametrize(("version", "concentrator", "noautoscale"),
                         [("16.2.15", False, True), ("16.2.7", False, False),
                          ("19.2.3", False, True), ("20.2.0", False, True),
                          ("20.2.4", False, True)])
def test_ceph_features_by_version(version: str, concentrator: bool, noautoscale: bool) -> None:
    table = compat.ceph(version)
    assert table.has_concentrator is concentrator
    assert table.has_noautoscale_flag is noautoscale


@pytest.mark.parametrize(("component", "version"),
                         [("lmcache", "0.2.1"), ("vllm", "0.9.0"), ("ceph", "15.2.0"),
                          ("lmcache", "latest")])
def test_unknown_versions_are_refused(component: str, version: str) -> None:
    with pytest.raises(ValueError):
        getattr(compat, component)(version)


@pytest.mark.parametrize(("version", "zonegroup_hostnames", "graceful", "verified"),
                         [("16.2.15", False, False, True), ("18.2.4", False, False, False),
                          ("19.2.0", True, False, False), ("19.2.6", True, False, True),
                          ("20.2.4", True, True, True)])
def test_ceph_rgw_spec_features(version: str, zonegroup_hostnames: bool, graceful: bool,
                                verified: bool) -> None:
    table = compat.ceph(version)
    assert table.has_zonegroup_hostnames is zonegroup_hostnames
    assert table.has_graceful_stop is graceful
    assert table.verified is verified


def test_vllm_034_row_from_the_wheel() -> None:
    v34 = compat.vllm("0.34.0")
    assert v34.default_block_size["cuda"] == 64 and v34.rope_override == "rope_parameters"
    assert v34.kv_transfer_fields == compat.vllm("0.33.0").kv_transfer_fields
    assert "VLLM_USE_V1" not in v34.env_for("gaudi3")
    assert v34.gaudi_bucketing_env == "VLLM_BUCKETING_STRATEGY"
    # no vllm-gaudi release for 0.34: gaudi3 is the 0.26 row's, with the plugin pinned
    assert "gaudi3" not in v34.accelerators
    assert compat.vllm("0.26.0").packages("gaudi3", "0.26.0") == \
        ["vllm==0.26.0", "vllm-gaudi==0.26.0"]
    assert v34.needs_wheelhouse("rocm") and not v34.needs_wheelhouse("cuda")
    assert v34.groups_for("rocm") == ["video", "render"]


def test_coredns_rows_say_how_they_were_verified() -> None:
    assert compat.coredns_verified("1.12.1")
    assert compat.coredns_verified("1.15.0") is None
