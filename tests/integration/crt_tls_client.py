"""Run by test_haproxy_tls.py in a private mount namespace, with awscrt's *default* trust
store, as LMCache 0.5.6 uses it (s3_connector.py: `TlsContextOptions()` / tls_mode ENABLED,
no CA option). `s3 HOST:PORT`: S3Client GETs one object through the virtual-hosted name and
prints the status; `tls HOST PORT`: one TLS connection with the default client context
(what S3Client's default TLS context is), printing the CRT error when it is refused (the
S3Client itself retries a refused handshake for a long time)."""

import json
import sys

from awscrt import auth, http, io, s3

elg = io.EventLoopGroup(1)
bootstrap = io.ClientBootstrap(elg, io.DefaultHostResolver(elg))
seen: dict[str, object] = {}

if sys.argv[1] == "s3":
    client = s3.S3Client(bootstrap=bootstrap, region="default",
                         credential_provider=auth.AwsCredentialsProvider.new_static("A", "S"),
                         tls_mode=s3.S3RequestTlsMode.ENABLED)

    def on_headers(status_code: int, headers: object, **kwargs: object) -> None:
        seen["status"] = status_code

    request = http.HttpRequest("GET", "/deploykit-crt-probe",
                               http.HttpHeaders([("Host", sys.argv[2])]))
    meta = client.make_request(type=s3.S3RequestType.DEFAULT, operation_name="GetObject",
                               request=request, on_headers=on_headers)
    meta.finished_future.result(30)
else:
    options = io.TlsConnectionOptions(io.ClientTlsContext(io.TlsContextOptions()))
    options.set_server_name(sys.argv[2])
    future = http.HttpClientConnection.new(host_name=sys.argv[2], port=int(sys.argv[3]),
                                           bootstrap=bootstrap, tls_connection_options=options)
    try:
        future.result(60).close()  # s2n reports a refused handshake after its 10-30 s
        # blinding delay
        seen["connected"] = True
    except Exception as exc:  # the CRT error name is the result
        seen["error"] = getattr(exc, "name", type(exc).__name__)
print(json.dumps(seen))
