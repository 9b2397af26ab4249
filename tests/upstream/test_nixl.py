"""NIXL has a backend for every rendered NIXL buffer. For each render with NIXL storage,
the pinned NIXL (compat `nixl_packages`: nixl==1.4.1, and the nixl-cu13 1.4.1 wheel it loads
for LMCache's CUDA 13 torch) must have a plugin for the rendered backend, and that plugin
must register the buffer's memory type: LMCache registers a `cpu` buffer as DRAM and any
other as VRAM (v1/storage_backend/nixl_storage_backend.py:521-526 in the 0.5.6 wheel). NIXL
answers itself (nixl_agent.get_plugin_mem_types, probes/nixl_backends.py); the OBJ plugin's
own strings say why VRAM is absent ("Accelerated engine support not available (not
compiled)", "Local memory type must be DRAM_SEG")."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import yaml

from deploy_kit.config import names
from deploy_kit.core import compat
from tests.upstream import fetch, renders, venvs
from tests.upstream.conftest import need, record

NIXL_CUDA_WHEEL = "nixl_cu13-{version}-cp311-cp311-manylinux_2_28_x86_64.whl"
MEM_TYPE = {"cpu": "DRAM_SEG"}   # anything else: VRAM_SEG
PLUGINS = ".nixl_cu13.mesonpy.libs/plugins"


def nixl_version() -> str:
    (pin,) = compat.lmcache(renders.LMCACHE).nixl_packages or ["nixl==?"]
    assert pin.startswith("nixl=="), f"compat nixl_packages: {pin}"
    return pin.removeprefix("nixl==")


def nixl_paths() -> list[Path]:
    version = nixl_version()
    return [need(fetch.unpacked, "nixl", f"nixl-{version}-py3-none-any.whl"),
            need(fetch.unpacked, "nixl-cu13", NIXL_CUDA_WHEEL.format(version=version))]


def nixl_answer(stack: Path, backends: list[str]) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(str(p) for p in nixl_paths()))
    proc = subprocess.run([str(stack / "bin" / "python"),
                           str(venvs.PROBES / "nixl_backends.py")],
                          input=json.dumps({"backends": backends}), capture_output=True,
                          text=True, env=env, timeout=300, check=False)
    assert proc.returncode == 0, f"NIXL probe failed: {proc.stderr[-2000:]}"
    answer: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return answer


def nixl_renders(all_renders: tuple[renders.ServingRender, ...]) -> list[tuple[
        renders.ServingRender, dict[str, Any]]]:
    out = []
    for render in all_renders:
        path = names.lmcache_config_path(render.host.config)
        if render.inprocess and path in render.files:
            config = yaml.safe_load(render.files[path].content)
            if (config.get("extra_config") or {}).get("enable_nixl_storage"):
                out.append((render, config))
    return out


def test_nixl_plugin_registers_rendered_buffer(
        serving_renders: tuple[renders.ServingRender, ...], cpu_stack: Path) -> None:
    found = nixl_renders(serving_renders)
    assert found, "no render uses NIXL storage: this check has nothing to read"
    backends = sorted({c["extra_config"]["nixl_backend"] for _, c in found})
    answer = nixl_answer(cpu_stack, backends)
    assert answer["module"].startswith("nixl_cu13"), answer["module"]
    failures = []
    for render, config in found:
        backend = config["extra_config"]["nixl_backend"]
        device = str(config.get("nixl_buffer_device", "cpu")).split(":")[0]
        wanted = MEM_TYPE.get(device, "VRAM_SEG")
        row = f"{render.vllm_row}-{render.accelerator}"
        if backend not in answer["plugins"]:
            failures.append(f"{render.name}: NIXL {nixl_version()} has no {backend} plugin "
                            f"({answer['plugins']})")
        elif wanted not in answer["mem_types"][backend]:
            failures.append(f"{render.name}: nixl_buffer_device {device} needs {wanted}; NIXL "
                            f"{nixl_version()}'s {backend} registers "
                            f"{answer['mem_types'][backend]} only")
        record(row, "NIXL buffer", f"FAIL: {failures[-1]}" if failures and
               failures[-1].startswith(render.name) else f"pass ({backend}, {device})")
    assert not failures, "\n".join(failures)


def test_obj_plugin_has_no_vram_engine() -> None:
    """The evidence inside the pinned OBJ plugin for its DRAM/OBJ-only answer."""
    plugin = nixl_paths()[1] / PLUGINS / "libplugin_OBJ.so"
    text = plugin.read_bytes()
    assert b"Accelerated engine support not available (not compiled)" in text
    assert b"Local memory type must be DRAM_SEG" in text
