"""LMCache's compiled extensions resolve against the torch each serving host runs. For every
rendered host that installs PyPI's LMCache wheel, every C++ symbol its extensions
(lmcache/*.so) leave undefined and unversioned (torch's c10/at/caffe2/torch ones: libstdc++'s
carry a GLIBCXX/CXXABI version) must be defined by that torch's libc10, libc10_cuda,
libtorch, libtorch_cpu and libtorch_python (`nm -D`, only those members read from the
~550 MB wheel by HTTP range requests). The torch is the one the row installs: vLLM's pin in
its requirements/<accelerator>.txt, or compat's torch_pins where deploykit pins its own (the
CPU row). A host with lmcache_wheel_dir, or on a row whose build is off PyPI, installs a
site-built LMCache: reported as "site wheel required", which deploykit's own settings decide
(compat wheel_source, or validate asking for lmcache_wheel_dir)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from deploy_kit.core import compat
from tests.upstream import fetch, renders, vllm_source
from tests.upstream.conftest import need, record, row_renders

ROWS = renders.rows()
PYTHON_TAG = "cp311"   # the serving hosts' python (Debian 12)
TORCH_LIBS = ("libc10.so", "libc10_cuda.so", "libtorch.so", "libtorch_cpu.so",
              "libtorch_python.so")
LMCACHE_WHEEL = f"lmcache-{renders.LMCACHE}-{PYTHON_TAG}-{PYTHON_TAG}-" \
                "manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl"


def nm(path: Path, *flags: str) -> set[str]:
    tool = shutil.which("nm")
    assert tool, "nm (binutils) is needed to read the symbol tables"
    out = subprocess.run([tool, "-D", *flags, str(path)], capture_output=True, text=True,
                         check=True).stdout
    return {line.split()[-1] for line in out.splitlines() if line.strip()}


def pypi_lmcache(render: renders.ServingRender) -> bool:
    """Whether the host installs PyPI's LMCache wheel: not when the site names its own
    (lmcache_wheel_dir), and not where the row's build is off PyPI (compat wheel_source:
    roles/serving/tasks/install_lmcache.yml asserts a wheel directory there)."""
    c = render.host.config
    return c.lmcache_install and not c.lmcache_wheel_dir and \
        not compat.vllm(render.vllm_version).needs_wheelhouse(render.accelerator)


def torch_pin(render: renders.ServingRender) -> str:
    """The torch version the host installs with this vLLM."""
    table = compat.vllm(render.vllm_version)
    for pin in (table.torch_pins or {}).get(render.accelerator, []):
        if pin.startswith("torch=="):
            return pin.removeprefix("torch==")
    source = need(vllm_source.sdist, render.vllm_version)
    spec = vllm_source.requirement(source, f"{render.accelerator}.txt", "torch")
    assert spec.startswith("=="), f"vLLM {render.vllm_version} does not pin torch: {spec}"
    return spec[2:]


def torch_exports(version: str) -> set[str]:
    wheel = f"torch-{version}-{PYTHON_TAG}-{PYTHON_TAG}-manylinux_2_28_x86_64.whl"
    members = need(fetch.wheel_members, "torch", wheel, [f"torch/lib/{n}" for n in TORCH_LIBS])
    defined: set[str] = set()
    for path in members.values():
        defined |= nm(path, "--defined-only")
    return defined


def lmcache_extensions() -> dict[str, set[str]]:
    root = need(fetch.unpacked, "lmcache", LMCACHE_WHEEL)
    extensions = sorted((root / "lmcache").glob("*.so"))
    assert extensions, f"{LMCACHE_WHEEL} has no compiled extension"
    return {p.name: {s for s in nm(p, "--undefined-only") if s.startswith("_Z") and "@" not in s}
            for p in extensions}


def demangle(symbols: set[str]) -> list[str]:
    tool = shutil.which("c++filt")
    if not tool:
        return sorted(symbols)
    out = subprocess.run([tool], input="\n".join(sorted(symbols)), capture_output=True,
                         text=True, check=True).stdout
    return [f"{d} ({m})" for d, m in zip(out.splitlines(), sorted(symbols), strict=True)]


@pytest.mark.parametrize(("row", "accelerator"), ROWS, ids=[f"{r}-{a}" for r, a in ROWS])
def test_lmcache_extensions_resolve_against_row_torch(
        serving_renders: tuple[renders.ServingRender, ...], row: str, accelerator: str) -> None:
    found = [r for r in row_renders(serving_renders, row, accelerator)
             if r.lmcache_version == renders.LMCACHE]
    assert found, f"no LMCache {renders.LMCACHE} render of vLLM {row} on {accelerator}"
    pypi = [r for r in found if pypi_lmcache(r)]
    if not pypi:
        record(f"{row}-{accelerator}", "LMCache symbols", "site wheel required")
        return
    failures, checked = [], set()
    extensions = lmcache_extensions()
    for render in pypi:
        version = torch_pin(render)
        if version in checked:
            continue
        checked.add(version)
        defined = torch_exports(version)
        for name, undefined in extensions.items():
            missing = undefined - defined
            if missing:
                failures.append(f"{name} on torch {version} (vLLM {render.vllm_version}, "
                                f"{render.name}): {len(missing)} undefined: "
                                + "; ".join(demangle(missing)))
    versions = ", ".join(sorted(checked))
    record(f"{row}-{accelerator}", "LMCache symbols",
           f"pass (torch {versions})" if not failures else f"FAIL: {failures[0]}")
    assert not failures, "\n".join(failures)
