"""The real HAProxy on the rendered haproxy.cfg: the stats page (a basic-auth login) is on
loopback only, the monitor port on the host address serves /health and /metrics (what
Consul and the monitoring host's Prometheus read) and nothing else; the opt-out serves
/stats on the host address, over TLS when the site's S3 TLS is on. `haproxy -c` accepts
every variant. 127.0.0.2 stands in for the host's address."""

from __future__ import annotations

import base64
import copy
import http.client
import os
import ssl
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from deploy_kit.ops import tls
from deploy_kit.ops.site import open_site
from deploy_kit.render import tls as tls_names
from deploy_kit.render.files import render_site
from tests.conftest import BASE_HOSTS, InventoryFactory
from tests.integration.test_consul_dns import free_port
from tests.tools import require_tool

HOST = "127.0.0.2"  # the host's own address
LOGIN = {"DEPLOYKIT_STATS_USER": "admin", "DEPLOYKIT_STATS_PASSWORD": "s3cret"}
AUTH = {"Authorization": "Basic " + base64.b64encode(b"admin:s3cret").decode()}


def _render(make_inventory: InventoryFactory, ports: dict[str, int], **extra: object
            ) -> tuple[str, Path]:
    hosts = copy.deepcopy(BASE_HOSTS)
    hosts["all"]["children"]["rgw"]["hosts"] = {"rgw1": {"ansible_host": HOST}}
    root = make_inventory(hosts, all={
        "deploykit_s3_port": ports["s3"], "ceph_rgw_mode": "packages",
        "deploykit_ceph_fsid": "00000000-0000-0000-0000-000000000000",
        "deploykit_ceph_mon_host": "127.0.0.1", "ceph_rgw_count_per_host": 1,
        "ceph_rgw_frontend_port": ports["gw"], "ceph_rgw_concentrator_maxconn": 4096,
        "ceph_rgw_concentrator_monitor_port": ports["monitor"],
        "ceph_rgw_concentrator_stats_port": ports["stats"], **extra})
    site = open_site(str(root))
    cfg = render_site(site)["rgw1"]["/etc/haproxy/haproxy.cfg"].content
    if site.settings.deploykit_s3_tls:
        pem = tls.ensure_site_tls(site)[0].path
        cfg = cfg.replace(tls_names.HAPROXY_PEM_PATH, str(pem))
    return cfg, tls_names.ca_cert_path(site.root, site.settings)


def _local(cfg: str, tmp_path: Path) -> Path:
    """As on a host, with `*` = the host's address; socket and logs made local."""
    cfg = (cfg.replace("bind *:", f"bind {HOST}:")
           .replace("/run/haproxy/admin.sock", str(tmp_path / "admin.sock"))
           .replace("    log stderr format short local0 warning\n", ""))
    path = tmp_path / "haproxy.cfg"
    path.write_text(cfg)
    return path


@pytest.fixture
def ports() -> dict[str, int]:
    return {"s3": free_port(), "gw": free_port(), "monitor": free_port(), "stats": free_port()}


@pytest.fixture
def run_haproxy(tmp_path: Path) -> Iterator[object]:
    haproxy = require_tool("haproxy")
    procs: list[subprocess.Popen[bytes]] = []

    def start(cfg: str, monitor: int) -> Path:
        path = _local(cfg, tmp_path)
        check = subprocess.run([haproxy, "-c", "-f", str(path)], env={**os.environ, **LOGIN},
                               capture_output=True, text=True, timeout=30, check=False)
        assert check.returncode == 0, check.stdout + check.stderr  # haproxy -c accepts it
        procs.append(subprocess.Popen([haproxy, "-db", "-f", str(path)],
                                      env={**os.environ, **LOGIN},
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        deadline = time.monotonic() + 15
        while _get(HOST, monitor, "/metrics")[0] != 200:
            assert time.monotonic() < deadline, "haproxy never served /metrics"
            time.sleep(0.1)
        return path

    yield start
    for p in procs:
        p.terminate()
        p.wait(timeout=10)


def _get(host: str, port: int, path: str, headers: dict[str, str] | None = None,
         context: ssl.SSLContext | None = None) -> tuple[int | None, bytes]:
    conn = (http.client.HTTPSConnection(host, port, timeout=3, context=context) if context
            else http.client.HTTPConnection(host, port, timeout=3))
    try:
        conn.request("GET", path, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, resp.read()
    except OSError:
        return None, b""  # nothing listens there
    finally:
        conn.close()


def test_stats_on_loopback_metrics_on_the_host_address(
        make_inventory: InventoryFactory, ports: dict[str, int], run_haproxy: object) -> None:
    cfg, _ = _render(make_inventory, ports)
    assert f"bind 127.0.0.1:{ports['stats']}\n" in cfg
    run_haproxy(cfg, ports["monitor"])  # type: ignore[operator]
    monitor, stats = ports["monitor"], ports["stats"]
    status, body = _get(HOST, monitor, "/metrics")  # what the monitoring host scrapes
    assert status == 200 and b"haproxy_server_status" in body
    assert _get(HOST, monitor, "/health")[0] in (200, 503)  # Consul's check: answered
    assert _get(HOST, monitor, "/stats", AUTH)[0] == 404  # no stats page on the host address
    assert _get(HOST, stats, "/stats", AUTH)[0] is None  # nothing listens there
    assert _get("127.0.0.1", stats, "/stats")[0] == 401  # loopback: the login still applies
    status, body = _get("127.0.0.1", stats, "/stats", AUTH)
    assert status == 200 and b"Statistics Report" in body


def test_the_opt_out_serves_stats_over_tls_when_the_site_has_tls(
        make_inventory: InventoryFactory, ports: dict[str, int], run_haproxy: object) -> None:
    cfg, ca = _render(make_inventory, ports, ceph_rgw_concentrator_stats_public=True,
                      deploykit_s3_tls=True, deploykit_s3_fqdn="s3.t.test")
    assert f"bind *:{ports['stats']} ssl crt" in cfg
    run_haproxy(cfg, ports["monitor"])  # type: ignore[operator]
    context = ssl.create_default_context(cafile=str(ca))
    context.check_hostname = False  # the certificate names the host's address, not 127.0.0.2
    status, body = _get(HOST, ports["stats"], "/stats", AUTH, context)
    assert status == 200 and b"Statistics Report" in body
    assert _get(HOST, ports["stats"], "/stats", AUTH)[0] is None  # no clear text there


def test_the_opt_out_without_tls_is_plain_http(make_inventory: InventoryFactory,
                                               ports: dict[str, int], run_haproxy: object
                                               ) -> None:
    cfg, _ = _render(make_inventory, ports, ceph_rgw_concentrator_stats_public=True)
    assert f"bind *:{ports['stats']}\n" in cfg and "clear text" in cfg
    run_haproxy(cfg, ports["monitor"])  # type: ignore[operator]
    assert _get(HOST, ports["stats"], "/stats", AUTH)[0] == 200
