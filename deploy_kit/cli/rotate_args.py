"""`deploykit secrets rotate`: which secret (WHAT), and the question asked before a
rotation restarts services. The rotations are deploy_kit.flows.rotate."""

from __future__ import annotations

import sys

import typer

from deploy_kit.flows.rotate import What

# the names `secrets rotate` took at first (the store's keys)
LEGACY = {"vllm_api_key": What.vllm_api_key, "consul_gossip_key": What.gossip,
          "consul_acl_management_token": What.consul_tokens,
          "consul_acl_agent_token": What.consul_tokens,
          "consul_acl_service_token": What.consul_tokens,
          "consul_acl_dns_token": What.consul_tokens,
          "lmcache_l2_master_key": What.l2_key}


def parse_what(name: str) -> What:
    if name in LEGACY:
        return LEGACY[name]
    try:
        return What(name)
    except ValueError:
        raise typer.BadParameter(
            f"{name!r}: rotate one of {', '.join(w.value for w in What)}",
            param_hint="WHAT") from None


def confirm(question: str, yes: bool, check: bool) -> None:
    """Ask before a rotation that restarts services; refuse without a terminal or --yes."""
    if yes or check:
        return
    if not sys.stdin.isatty():
        raise typer.BadParameter("a rotation restarts services host by host; pass --yes (or "
                                 "--check to see what it would do)", param_hint="--yes")
    typer.confirm(question, abort=True)
