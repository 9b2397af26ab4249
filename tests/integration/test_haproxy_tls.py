"""TLS end to end on loopback: deploykit creates the site CA and issues the concentrator
certificate, the real HAProxy runs the rendered haproxy.cfg (TLS bind) in front of a
stand-in gateway, and real TLS clients (Python's ssl, verify's probe and SigV4 client)
check chain, SANs and expiry the way LMCache's client would (SNI <bucket>.<fqdn>)."""

from __future__ import annotations

import copy
import http.server
import json
import os
import shutil
import ssl
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest

import deploy_kit.verify.checks  # noqa: F401  (registers the checks)
from deploy_kit.ops import tls
from deploy_kit.ops.site import open_site
from deploy_kit.render import tls as tls_names
from deploy_kit.render.files import render_site
from deploy_kit.transport.sigv4 import Credentials, request
from deploy_kit.verify.model import Observation, Status, evaluate
from deploy_kit.verify.probes import tls_probe
from tests.conftest import BASE_HOSTS, InventoryFactory
from tests.integration.test_consul_dns import free_port
from tests.tools import require_tool

FQDN, BUCKET = "s3.t.test", "lmcache"
VHOST = f"{BUCKET}.{FQDN}"


class _Gateway(http.server.BaseHTTPRequestHandler):
    """RGW stand-in: health check, and a bucket listing naming the Host it was sent."""

    seen: ClassVar[list[dict[str, str]]] = []

    def do_GET(self) -> None:
        type(self).seen.append({k.lower(): v for k, v in self.headers.items()})
        body = b"ok" if self.path == "/swift/healthcheck" else \
            f"<ListBucketResult><Name>{self.headers['Host']}</Name></ListBucketResult>".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_HEAD(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def gateway() -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Gateway)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield int(server.server_address[1])
    server.shutdown()
    server.server_close()


def _site(make_inventory: InventoryFactory, gateway: int, s3: int, monitor: int,
          days: int = 365) -> Path:
    hosts = copy.deepcopy(BASE_HOSTS)
    hosts["all"]["children"]["rgw"]["hosts"] = {"rgw1": {"ansible_host": "127.0.0.1"}}
    return make_inventory(hosts, all={
        "deploykit_s3_tls": True, "deploykit_s3_port": s3, "deploykit_s3_fqdn": FQDN,
        "deploykit_s3_bucket": BUCKET, "ceph_rgw_mode": "packages",
        "deploykit_ceph_fsid": "00000000-0000-0000-0000-000000000000",
        "deploykit_ceph_mon_host": "127.0.0.1", "ceph_rgw_count_per_host": 1,
        "ceph_rgw_frontend_port": gateway, "ceph_rgw_concentrator_monitor_port": monitor,
        "deploykit_tls_cert_days": days,
        "ceph_rgw_concentrator_maxconn": 4096})  # this machine's fd limit is 20000


def start_rendered_haproxy(haproxy: str, cfg: str, tmp_path: Path) -> subprocess.Popen[bytes]:
    """The real HAProxy on a rendered haproxy.cfg, made local: loopback binds, the admin
    socket at tmp_path/admin.sock, no log lines (nothing drains its stderr pipe), the stats
    login from the environment. User, group and chroot stay as rendered: the test runs as
    root, so HAProxy drops to `haproxy` inside /var/lib/haproxy as on a gateway host."""
    cfg = (cfg.replace("bind *:", "bind 127.0.0.1:")
           .replace("/run/haproxy/admin.sock", str(tmp_path / "admin.sock"))
           .replace("    log stderr format short local0 warning\n", ""))
    (tmp_path / "haproxy.cfg").write_text(cfg)
    env = {**os.environ, "DEPLOYKIT_STATS_USER": "admin", "DEPLOYKIT_STATS_PASSWORD": "x"}
    return subprocess.Popen([haproxy, "-db", "-f", str(tmp_path / "haproxy.cfg")], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def _wait_health(port: int) -> None:
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.1)
    raise AssertionError("haproxy /health never answered 200")


@pytest.fixture
def concentrator(make_inventory: InventoryFactory, gateway: int, tmp_path: Path,
                 request: pytest.FixtureRequest) -> Iterator[tuple[Path, int]]:
    """The rendered haproxy.cfg of rgw1 with the issued PEM, run by the real HAProxy."""
    haproxy = require_tool("haproxy")
    s3, monitor = free_port(), free_port()
    root = _site(make_inventory, gateway, s3, monitor, getattr(request, "param", 365))
    site = open_site(str(root))
    issued = tls.ensure_site_tls(site)
    assert [i.action for i in issued] == ["issued"]
    cfg = render_site(site)["rgw1"]["/etc/haproxy/haproxy.cfg"].content
    assert f"ssl crt {tls_names.HAPROXY_PEM_PATH}" in cfg
    # the issued PEM from the controller's TLS directory
    proc = start_rendered_haproxy(
        haproxy, cfg.replace(tls_names.HAPROXY_PEM_PATH, str(issued[0].path)), tmp_path)
    try:
        try:
            _wait_health(monitor)
        except AssertionError:
            proc.terminate()
            raise AssertionError((proc.communicate(timeout=10)[0] or b"").decode()) from None
        yield root, s3
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _observe(root: Path, port: int, ca: Path | None = None) -> Observation:
    site = open_site(str(root))
    obs = Observation(fqdn=FQDN, bucket=BUCKET, region="default", rgw_addresses=["127.0.0.1"],
                      dns_servers=[], expected_pools=[], expected_rgw_daemons=1,
                      expected_lifecycle={"Rules": []}, pinned={"tls": "1"})
    obs.tls = [tls_probe.probe("127.0.0.1", port, VHOST,
                               ca or tls_names.ca_cert_path(site.root, site.settings))]
    return obs


def test_haproxy_terminates_tls_with_the_issued_certificate(
        concentrator: tuple[Path, int]) -> None:
    root, port = concentrator
    obs = _observe(root, port)
    t = obs.tls[0]
    assert t.handshake_error is None and t.verify_error is None, t
    assert t.dns_sans == [FQDN, f"*.{FQDN}"] and t.ip_sans == ["127.0.0.1"]
    assert t.days_left is not None and 364 < t.days_left < 366
    findings = evaluate(obs, {"s3-tls-certificate"})
    assert [f.status for f in findings] == [Status.PASS], findings
    # a SigV4 request through https with the site CA and SNI = the virtual-hosted name
    ca = tls_names.ca_cert_path(root, open_site(str(root)).settings)
    status, body = request("127.0.0.1", port, "GET", "/", VHOST, "default",
                           Credentials("A", "S"), tls=tls_probe.client_context(ca))
    assert status == 200 and VHOST.encode() in body
    assert _Gateway.seen[-1]["x-forwarded-proto"] == "https"
    # the plain apex name verifies as well; a name outside the certificate does not
    ctx = tls_probe.client_context(ca)
    with ssl.create_connection(("127.0.0.1", port)) as raw, \
            ctx.wrap_socket(raw, server_hostname=FQDN) as s:
        assert s.version() in ("TLSv1.2", "TLSv1.3")
        assert s.selected_alpn_protocol() in (None, "http/1.1")
    with pytest.raises(ssl.SSLCertVerificationError, match="Hostname mismatch"), \
            ssl.create_connection(("127.0.0.1", port)) as raw:
        ctx.wrap_socket(raw, server_hostname="lmcache.other.test")
    # TLS only on the S3 port: a plain-HTTP client gets no S3 answer
    with pytest.raises(OSError):
        request("127.0.0.1", port, "GET", "/", VHOST, "default", None, timeout=5)


def test_a_certificate_from_another_ca_fails_the_check(concentrator: tuple[Path, int],
                                                       tmp_path: Path) -> None:
    root, port = concentrator
    other = tmp_path / "other-ca.crt"
    other.write_bytes(tls.create_ca("someone else")[0])
    obs = _observe(root, port, other)
    assert obs.tls[0].verify_error and "issuer" in obs.tls[0].verify_error
    failing = [f for f in evaluate(obs, {"s3-tls-certificate"}) if f.status == Status.FAIL]
    assert failing and "does not verify against the site CA" in failing[0].message


@pytest.mark.parametrize("concentrator", [20], indirect=True)
def test_a_certificate_close_to_expiry_warns(concentrator: tuple[Path, int]) -> None:
    root, port = concentrator
    findings = evaluate(_observe(root, port), {"s3-tls-certificate"})
    assert [f.status for f in findings] == [Status.WARN], findings
    assert "expires in 20 days" in findings[0].message or \
        "expires in 19 days" in findings[0].message


def test_nothing_answers_tls_where_plain_http_runs(gateway: int) -> None:
    """Against a plain-HTTP port (TLS off, or a stale haproxy.cfg) the check fails."""
    t = tls_probe.probe("127.0.0.1", gateway, VHOST, Path("/nonexistent"), timeout=3)
    assert t.handshake_error
    obs = Observation(fqdn=FQDN, bucket=BUCKET, region="default", rgw_addresses=["127.0.0.1"],
                      dns_servers=[], expected_pools=[], expected_rgw_daemons=1,
                      expected_lifecycle={"Rules": []}, pinned={"tls": "1"}, tls=[t])
    assert [f.status for f in evaluate(obs, {"s3-tls-certificate"})] == [Status.FAIL]


CRT_CLIENT = Path(__file__).parent / "crt_tls_client.py"
SYSTEM_BUNDLE = Path(tls_names.SYSTEM_BUNDLE)


def _crt(tmp_path: Path, bundle: Path, *args: str) -> dict:
    """The awscrt client in its own mount namespace: /etc/hosts names the bucket host
    127.0.0.1 and `bundle` stands in for the system CA bundle, nothing on this machine
    changes."""
    hosts = tmp_path / "hosts"
    hosts.write_text(f"127.0.0.1 localhost {VHOST} {FQDN}\n")
    script = (f"mount --bind {hosts} /etc/hosts && mount --bind {bundle} {SYSTEM_BUNDLE} && "
              f"exec {sys.executable} {CRT_CLIENT} {' '.join(args)}")
    result = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return dict(json.loads(result.stdout.strip().splitlines()[-1]))


def test_awscrt_trusts_the_site_ca_through_the_system_bundle(
        concentrator: tuple[Path, int], tmp_path: Path) -> None:
    """What the serving hosts rely on (roles/serving/tasks/tls_trust.yml): LMCache's client,
    awscrt with its default TLS context, accepts the concentrator only once the site CA is in
    /etc/ssl/certs/ca-certificates.crt, as update-ca-certificates puts it there."""
    if os.geteuid() != 0 or not shutil.which("unshare") or not SYSTEM_BUNDLE.exists():
        pytest.skip("needs root, unshare and a Debian CA bundle (a private mount namespace)")
    root, port = concentrator
    ca = tls_names.ca_cert_path(root, open_site(str(root)).settings)
    with_ca = tmp_path / "with-ca.crt"
    with_ca.write_bytes(SYSTEM_BUNDLE.read_bytes() + b"\n" + ca.read_bytes())
    assert _crt(tmp_path, with_ca, "s3", f"{VHOST}:{port}") == {"status": 200}
    assert _crt(tmp_path, with_ca, "tls", VHOST, str(port)) == {"connected": True}
    without = _crt(tmp_path, SYSTEM_BUNDLE, "tls", VHOST, str(port))
    assert without.get("error") == "AWS_IO_TLS_ERROR_NEGOTIATION_FAILURE", without


def test_boto3_reaches_a_gateway_by_address_with_the_site_ca(
        concentrator: tuple[Path, int]) -> None:
    """The bucket module (ceph_rgw_s3 role) talks to the first gateway by address over
    https: botocore verifies the host's IP SAN against the site CA (not certifi's bundle)."""
    boto3 = pytest.importorskip("boto3")
    from botocore.config import Config

    root, port = concentrator
    ca = tls_names.ca_cert_path(root, open_site(str(root)).settings)

    def head(verify: str | bool) -> int:
        s3 = boto3.client("s3", endpoint_url=f"https://127.0.0.1:{port}", aws_access_key_id="A",
                          aws_secret_access_key="S", region_name="default", verify=verify,
                          config=Config(s3={"addressing_style": "path"},
                                        retries={"max_attempts": 1}))
        return int(s3.head_bucket(Bucket=BUCKET)["ResponseMetadata"]["HTTPStatusCode"])

    assert head(str(ca)) == 200
    from botocore.exceptions import SSLError

    with pytest.raises(SSLError):
        head(True)  # certifi's bundle does not know the site CA


def test_awscrt_uses_port_443_when_the_host_has_none(tmp_path: Path) -> None:
    """remote_url s3://<bucket>.<fqdn> carries no port with TLS on 443 (names.endpoint_host):
    awscrt 0.38.1 then connects to 443 (research notes had this unverified)."""
    if os.geteuid() != 0 or not shutil.which("unshare") or not SYSTEM_BUNDLE.exists():
        pytest.skip("needs root, unshare and a Debian CA bundle (private net + mount namespace)")
    script = Path(__file__).parent / "crt_default_port.py"
    result = subprocess.run(
        ["unshare", "-n", "-m", "--propagation", "private", "sh", "-c",
         f"ip link set lo up && exec {sys.executable} {script} {tmp_path}"],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])})
    assert json.loads(result.stdout.strip().splitlines()[-1]) == {"status": 200}, \
        result.stdout + result.stderr
