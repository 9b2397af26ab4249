"""Ask each DNS server directly (never the controller's resolv.conf), over UDP and TCP."""

from __future__ import annotations

import dns.exception
import dns.message
import dns.query
import dns.rcode
import dns.rdatatype

from deploy_kit.verify.model import DnsAnswer


def ask(server: str, name: str, transport: str, port: int = 53,
        timeout: float = 3.0) -> DnsAnswer:
    query = dns.message.make_query(name if name.endswith(".") else name + ".", "A")
    answer = DnsAnswer(server=server, name=name, transport=transport)
    try:
        send = dns.query.udp if transport == "udp" else dns.query.tcp
        reply = send(query, server, port=port, timeout=timeout)
    except (dns.exception.DNSException, OSError) as exc:
        answer.error = f"{type(exc).__name__}: {exc}"
        return answer
    # a server (or a middlebox) closed the TCP connection without an answer; uncaught,
    # Click would read EOFError as end of input and verify would exit 130
    except EOFError:
        answer.error = "EOFError: the server closed the connection without an answer"
        return answer
    if reply.rcode() != dns.rcode.NOERROR:
        answer.error = dns.rcode.to_text(reply.rcode())
        return answer
    for rrset in reply.answer:
        if rrset.rdtype == dns.rdatatype.A:
            answer.addresses += [r.address for r in rrset]
            answer.owner_names.append(rrset.name.to_text())
            answer.ttl = rrset.ttl if answer.ttl is None else min(answer.ttl, rrset.ttl)
    return answer
