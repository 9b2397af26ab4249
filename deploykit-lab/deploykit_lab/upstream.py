"""The lab's upstream resolver: a second CoreDNS on the controller's bridge address.

The lab's CoreDNS servers forward every name outside the S3 zone to it (the Corefile's
catch-all `.:53` block), so that block is exercised as it is on a site. It answers a few
lab names and NXDOMAIN for everything else: nothing leaves the machine.
"""

from __future__ import annotations

import socket
import subprocess
import time

from deploykit_lab.layout import GATEWAY, LAB_DIR, UPSTREAM_PORT, coredns_binary
from deploykit_lab.system import LabError, log

PORT = UPSTREAM_PORT
NAMES = {"controller.lab.test": GATEWAY, "upstream.lab.test": GATEWAY}
UPSTREAM_DIR = LAB_DIR / "upstream"


def address() -> str:
    return f"{GATEWAY}:{PORT}"


def corefile() -> str:
    entries = "\n".join(f"        {ip} {name}" for name, ip in sorted(NAMES.items()))
    # no `bind`: the lab's CoreDNS build has no bind plugin (go/coredns/main.go)
    return (f".:{PORT} {{\n    errors\n    hosts {{\n{entries}\n"
            "        ttl 30\n    }\n}\n")


def start() -> int:
    """Start it (its argv names LAB_DIR, so `lab down` finds it even without the state)."""
    UPSTREAM_DIR.mkdir(parents=True, exist_ok=True)
    conf = UPSTREAM_DIR / "Corefile"
    conf.write_text(corefile())
    out = (UPSTREAM_DIR / "coredns.out").open("a")
    proc = subprocess.Popen([str(coredns_binary()), "-conf", str(conf)], cwd=UPSTREAM_DIR,
                            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise LabError("the lab's upstream resolver exited",
                           hint=f"see {UPSTREAM_DIR / 'coredns.out'}")
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            try:
                s.settimeout(0.5)
                s.sendto(_query("upstream.lab.test"), (GATEWAY, PORT))
                if s.recv(512):
                    log(f"started upstream resolver pid {proc.pid} on {address()}")
                    return proc.pid
            except OSError:
                time.sleep(0.2)
    proc.kill()
    raise LabError("the lab's upstream resolver never answered", hint=str(UPSTREAM_DIR))


def _query(name: str) -> bytes:
    """A minimal DNS A query (the controller may lack dnspython outside the venv)."""
    header = b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00"
    labels = b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\x00"
    return header + labels + b"\x00\x01\x00\x01"
