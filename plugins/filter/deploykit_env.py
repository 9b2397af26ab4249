"""Filters for the files the roles write themselves (secrets that are never rendered)."""

from __future__ import annotations

from typing import Any

from deploy_kit.render.serving_front import key_digest
from deploy_kit.render.templating import env_quote


class FilterModule:
    """`deploykit.kvcache.env_quote`: one value of a systemd EnvironmentFile, byte for byte
    (the same quoting deploykit's rendered env files use). `vllm_front_digest`: what the
    serving front's keys file holds for one API key (render/serving_front.py key_digest)."""

    def filters(self) -> dict[str, Any]:
        return {"env_quote": env_quote, "vllm_front_digest": key_digest}
