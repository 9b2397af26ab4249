"""The main part of a tiny S3 client that runs *on a lab host*: the test sends
tests/lab/sigv4_stdlib.py (stdlib only) followed by this file over SSH stdin, so
keys travel in the script text, never in argv. It PUTs a random object through the
virtual-hosted bucket name (resolved by the host's resolver), GETs it back, compares and
deletes it. Placeholders are filled in by the test."""

import hashlib
import json
import os
import socket
import ssl

NAME, SIZE, PORT = "__HOST__", int("__SIZE__"), int("__PORT__")
# TLS: the host's default trust store (the site CA deploykit installed), SNI = the name
TLS = ssl.create_default_context() if "__TLS__" else None
CREDS = Credentials("__ACCESS__", "__SECRET__")  # noqa: F821  (defined by sigv4_stdlib.py, sent first)
PATH = "/deploykit-smoke-object"

payload = os.urandom(SIZE)
put, _ = request(NAME, PORT, "PUT", PATH, NAME, "default", CREDS, payload, tls=TLS)  # noqa: F821
get, body = request(NAME, PORT, "GET", PATH, NAME, "default", CREDS, tls=TLS)  # noqa: F821
delete, _ = request(NAME, PORT, "DELETE", PATH, NAME, "default", CREDS, tls=TLS)  # noqa: F821
print(json.dumps({"put": put, "get": get, "delete": delete, "bytes": len(body),
                  "same": hashlib.sha256(body).digest() == hashlib.sha256(payload).digest(),
                  "resolved": sorted({a[4][0] for a in socket.getaddrinfo(NAME, 80,
                                                                        socket.AF_INET)})}))
