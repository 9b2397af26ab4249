#!/usr/bin/python
"""Wait until every DNS server answers a name with (or without) one address: the drain gate."""

from __future__ import annotations

import random
import socket
import struct
import time

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: deploykit_dns_wait
short_description: Wait until each DNS server answers a name with, or without, an address
description: >-
  Asks every given DNS server for the name's A (or AAAA, for an IPv6 address) records,
  straight over UDP from the host it runs on (no resolver cache, no dig needed), until the
  address is in every server's answer (state=present) or in none (state=absent). A server
  that does not answer counts as answering without it. Reads only: never changed.
options:
  name: {type: str, required: true, description: the name to ask for}
  address: {type: str, required: true, description: the address to wait for}
  servers:
    type: list
    elements: str
    required: true
    description: DNS servers as address or address:port ([v6]:port for IPv6)
  state:
    type: str
    default: absent
    choices: [absent, present]
    description: wait for the address to leave every answer, or to be in every answer
  timeout: {type: int, default: 60, description: seconds before failing}
author: deploykit
"""

EXAMPLES = r"""
- name: Wait until no DNS server hands out this gateway
  deploykit.kvcache.deploykit_dns_wait:
    name: s3.example.internal
    address: 10.0.0.11
    servers: [10.0.0.21:53, 10.0.0.22:53]
    state: absent
"""

RETURN = r"""
answers: {description: "each server's addresses at the end (null: no answer)", type: dict}
waited: {description: seconds spent waiting, type: float}
"""

A, AAAA = 1, 28


def split_server(server: str) -> tuple[str, int]:
    if server.startswith("["):  # [v6]:port
        host, _, port = server[1:].partition("]:")
        return host, int(port or 53)
    if server.count(":") == 1:
        host, port = server.split(":")
        return host, int(port)
    return server, 53


def build_query(name: str, qtype: int) -> tuple[int, bytes]:
    ident = random.randrange(1 << 16)
    header = struct.pack("!HHHHHH", ident, 0x0100, 1, 0, 0, 0)  # recursion desired
    labels = b"".join(bytes([len(p)]) + p.encode("ascii") for p in name.rstrip(".").split("."))
    return ident, header + labels + b"\0" + struct.pack("!HH", qtype, 1)


def skip_name(packet: bytes, offset: int) -> int:
    while True:
        length = packet[offset]
        if length & 0xC0 == 0xC0:  # compression pointer: two bytes, ends the name
            return offset + 2
        if length == 0:
            return offset + 1
        offset += 1 + length


def parse_answers(packet: bytes, ident: int, qtype: int) -> list[str]:
    got, flags, qdcount, ancount = struct.unpack("!HHHH", packet[:8])
    if got != ident or not flags & 0x8000:
        raise ValueError("not the answer to this query")
    offset = 12
    for _ in range(qdcount):
        offset = skip_name(packet, offset) + 4
    family = socket.AF_INET if qtype == A else socket.AF_INET6
    found = []
    for _ in range(ancount):
        offset = skip_name(packet, offset)
        rtype, _cls, _ttl, length = struct.unpack("!HHIH", packet[offset:offset + 10])
        offset += 10
        if rtype == qtype:  # CNAMEs (Consul, rewrites) are skipped, their targets follow
            found.append(socket.inet_ntop(family, packet[offset:offset + length]))
        offset += length
    return found


def ask(server: str, name: str, qtype: int, wait_s: float = 1.0) -> list[str] | None:
    host, port = split_server(server)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    ident, query = build_query(name, qtype)
    with socket.socket(family, socket.SOCK_DGRAM) as sock:
        sock.settimeout(wait_s)
        try:
            sock.sendto(query, (host, port))
            deadline = time.monotonic() + wait_s
            while time.monotonic() < deadline:
                packet = sock.recv(4096)
                try:
                    return parse_answers(packet, ident, qtype)
                except (ValueError, struct.error, IndexError):
                    continue  # a stray or truncated datagram: keep listening
        except OSError:  # refused, unreachable, timed out: this server answers nothing
            return None
    return None


def settled(answers: dict[str, list[str] | None], address: str, state: str) -> bool:
    if state == "absent":
        return all(address not in (found or []) for found in answers.values())
    return all(found is not None and address in found for found in answers.values())


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "name": {"type": "str", "required": True},
            "address": {"type": "str", "required": True},
            "servers": {"type": "list", "elements": "str", "required": True},
            "state": {"type": "str", "default": "absent", "choices": ["absent", "present"]},
            "timeout": {"type": "int", "default": 60},
        },
        supports_check_mode=True,
    )
    p = module.params
    qtype = AAAA if ":" in p["address"] else A
    started = time.monotonic()
    while True:
        answers = {s: ask(s, p["name"], qtype) for s in p["servers"]}
        waited = round(time.monotonic() - started, 1)
        if settled(answers, p["address"], p["state"]):
            module.exit_json(changed=False, answers=answers, waited=waited)
        if waited >= p["timeout"]:
            where = "still answer with" if p["state"] == "absent" else "do not all answer with"
            module.fail_json(msg=f"after {p['timeout']} s the DNS servers {where} {p['address']} "
                                 f"for {p['name']}", answers=answers, waited=waited)
        time.sleep(1)


if __name__ == "__main__":
    main()
