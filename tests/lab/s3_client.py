"""A tiny SigV4 S3 client (Python stdlib only) that runs *on a lab host*: the test pipes it
over SSH with the keys in the script text (stdin, never argv). It PUTs a random object
through the virtual-hosted bucket name, GETs it back, compares and deletes it.

Placeholders __ACCESS__, __SECRET__, __HOST__, __REGION__, __SIZE__ are filled in by the test.
"""

import datetime
import hashlib
import hmac
import http.client
import json
import os

ACCESS, SECRET = "__ACCESS__", "__SECRET__"
HOST, REGION, SIZE = "__HOST__", "__REGION__", int("__SIZE__")


def sign(method, path, body_hash):
    now = datetime.datetime.now(datetime.UTC)
    amz_date, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
    headers = {"host": HOST, "x-amz-content-sha256": body_hash, "x-amz-date": amz_date}
    signed = ";".join(sorted(headers))
    canonical = "\n".join([method, path, "", *(f"{k}:{headers[k]}" for k in sorted(headers)),
                           "", signed, body_hash])
    scope = f"{day}/{REGION}/s3/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope,
                         hashlib.sha256(canonical.encode()).hexdigest()])
    key = ("AWS4" + SECRET).encode()
    for part in (day, REGION, "s3", "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    headers["Authorization"] = (f"AWS4-HMAC-SHA256 Credential={ACCESS}/{scope}, "
                                f"SignedHeaders={signed}, Signature={signature}")
    return headers


def request(method, path, body=b""):
    conn = http.client.HTTPConnection(HOST, 80, timeout=300)
    conn.request(method, path, body=body or None,
                 headers=sign(method, path, "UNSIGNED-PAYLOAD"))
    response = conn.getresponse()
    data = response.read()
    peer = conn.sock.getpeername()[0] if conn.sock else None
    conn.close()
    return response.status, data, peer


payload = os.urandom(SIZE)
put = request("PUT", "/deploykit-smoke-object", payload)
get = request("GET", "/deploykit-smoke-object")
delete = request("DELETE", "/deploykit-smoke-object")
print(json.dumps({"put": put[0], "get": get[0], "delete": delete[0],
                  "same": hashlib.sha256(get[1]).hexdigest() == hashlib.sha256(payload).hexdigest(),
                  "bytes": len(get[1]), "peers": [put[2], get[2]]}))
