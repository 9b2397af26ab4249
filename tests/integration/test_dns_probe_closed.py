"""A DNS server that closes the TCP connection without answering is a probe error the
checks report, never an exception that ends verify (Click reads an EOFError as end of input:
exit 130, "interrupted")."""

from __future__ import annotations

import socket
import threading

from deploy_kit.verify.probes.dns_probe import ask


def test_a_tcp_connection_closed_without_an_answer_is_a_probe_error() -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]

    def close_each() -> None:
        conn, _ = server.accept()
        conn.recv(512)
        conn.close()

    thread = threading.Thread(target=close_each, daemon=True)
    thread.start()
    try:
        answer = ask("127.0.0.1", "s3.example.com", "tcp", port=port, timeout=5)
    finally:
        thread.join(5)
        server.close()
    assert answer.error is not None and answer.error.startswith("EOFError"), answer
    assert answer.addresses == []
