"""Run by test_haproxy_tls.py as root inside `unshare -n -m` (its own loopback and mounts):
a TLS server with a deploykit-issued certificate on 127.0.0.1:443, the site CA in the
(bind-mounted) system bundle, and awscrt's S3Client sending `Host: lmcache.s3.t.test` with
no port, as LMCache does for remote_url s3://<bucket>.<fqdn> (deploykit leaves out :443)."""

import socket
import ssl
import subprocess
import sys
import threading
import time
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization

from deploy_kit.ops import tls

work = Path(sys.argv[1])
ca_pem, ca_key = tls.create_ca("t")
ca = tls.CA(x509.load_pem_x509_certificate(ca_pem),
            serialization.load_pem_private_key(ca_key, None), ca_pem)
cert, key = tls.issue(ca, ["s3.t.test", "*.s3.t.test"], [], 30)
(work / "c.pem").write_bytes(cert + key)
(work / "bundle.crt").write_bytes(Path("/etc/ssl/certs/ca-certificates.crt").read_bytes()
                                  + b"\n" + ca_pem)
(work / "hosts").write_text("127.0.0.1 localhost lmcache.s3.t.test\n")
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(work / "c.pem")
server = socket.create_server(("127.0.0.1", 443))


def serve() -> None:
    while True:
        conn, _ = server.accept()
        try:
            s = ctx.wrap_socket(conn, server_side=True)
            s.recv(65536)
            s.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            time.sleep(0.2)
            s.close()
        except OSError:
            pass


threading.Thread(target=serve, daemon=True).start()
client = Path(__file__).parent / "crt_tls_client.py"
result = subprocess.run(
    ["sh", "-c", f"mount --bind {work / 'hosts'} /etc/hosts && mount --bind "
                 f"{work / 'bundle.crt'} /etc/ssl/certs/ca-certificates.crt && exec "
                 f"{sys.executable} {client} s3 lmcache.s3.t.test"],
    capture_output=True, text=True, timeout=60)
print(result.stdout.strip().splitlines()[-1] if result.stdout.strip() else result.stderr[-500:])
