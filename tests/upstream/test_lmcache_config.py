"""LMCache 0.5.6 parses every rendered LMCache configuration with its own loaders (in the CPU
stack's venv: probes/lmcache_config.py): the in-process topology's lmcache.yaml through
LMCacheEngineConfig.from_file and validate(), the server topology's `lmcache server` argv
through LMCache's CLI parser and its config builders. An unknown or deprecated key, which
LMCache itself only logs, is an error here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from deploy_kit.config import names
from deploy_kit.render import lmcache_server
from tests.upstream import renders, venvs
from tests.upstream.conftest import record, row_renders

ROWS = renders.rows()
# renders this tier does not load: another LMCache series than the one it installs
OUT_OF_SCOPE = {"golden/legacy-versions": "LMCache 0.3.10 (compat series 0.3)"}


@pytest.fixture(scope="module")
def loaded(cpu_stack: Path, serving_renders: tuple[renders.ServingRender, ...]) -> dict[str, Any]:
    """Every render's LMCache configuration through LMCache, in one probe run."""
    inprocess, server = {}, {}
    for render in serving_renders:
        if render.lmcache_version != renders.LMCACHE:
            continue
        if render.inprocess:
            inprocess[render.name] = render.files[
                names.lmcache_config_path(render.host.config)].content
        else:
            server[render.name] = renders.exec_start(
                render.files[lmcache_server.UNIT_PATH].content)
    answer = venvs.probe(cpu_stack, "lmcache_config.py", {"inprocess": inprocess, "server": server})
    assert isinstance(answer, dict) and answer["lmcache"] == renders.LMCACHE
    results: dict[str, Any] = answer["results"]
    return results


def test_every_render_is_in_scope(serving_renders: tuple[renders.ServingRender, ...]) -> None:
    """Each render uses the LMCache this tier installs, or is named as outside it."""
    others = {r.source for r in serving_renders if r.lmcache_version != renders.LMCACHE}
    assert others <= set(OUT_OF_SCOPE), f"renders on another LMCache: {others - set(OUT_OF_SCOPE)}"


@pytest.mark.parametrize(("row", "accelerator"), ROWS, ids=[f"{r}-{a}" for r, a in ROWS])
def test_lmcache_parses_rendered_config(serving_renders: tuple[renders.ServingRender, ...],
                                        loaded: dict[str, Any], row: str,
                                        accelerator: str) -> None:
    results = loaded
    found = [r for r in row_renders(serving_renders, row, accelerator)
             if r.lmcache_version == renders.LMCACHE]
    assert found, f"no LMCache {renders.LMCACHE} render of vLLM {row} on {accelerator}"
    failures = [f"{r.name} ({r.topology}): {'; '.join(results[r.name]['errors'])}"
                for r in found if not results[r.name]["ok"]]
    topologies = ", ".join(sorted({r.topology for r in found}))
    record(f"{row}-{accelerator}", "LMCache config",
           f"pass ({topologies})" if not failures else f"FAIL: {failures[0]}")
    assert not failures, "\n".join(failures)


def test_encrypted_adapter_is_checked(serving_renders: tuple[renders.ServingRender, ...],
                                      loaded: dict[str, Any]) -> None:
    """At least one render encrypts its L2 (lmcache_l2_encryption), and LMCache's serde
    factory builds its aesgcm serde from the rendered fields (probes/lmcache_config.py
    serde_errors): a misspelt field fails here, not as a silent default at run time."""
    encrypted = [r for r in serving_renders if r.host.config.lmcache_l2_encryption
                 and r.lmcache_version == renders.LMCACHE]
    assert encrypted, "no render encrypts its L2"
    for render in encrypted:
        argv = renders.exec_start(render.files[lmcache_server.UNIT_PATH].content)
        assert '"serde":{"aes_bits"' in argv[argv.index("--l2-adapter") + 1]
        assert loaded[render.name]["ok"], loaded[render.name]["errors"]
