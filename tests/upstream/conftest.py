"""The upstream-replay tier (`make test-upstream`): deploykit's rendered files against the
pinned upstream code of every compat.yaml row. Downloads are cached once under
$DEPLOYKIT_UPSTREAM_CACHE (default /var/cache/deploykit/upstream); a download that fails
fails its test with one line. Not part of `make test`: collected only when named."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tests.upstream import fetch, renders, venvs

T = TypeVar("T")
HERE = Path(__file__).resolve().parent

# row ("0.34-cuda") -> check -> result, printed at the end (docs/upstream.md's table)
RESULTS: dict[str, dict[str, str]] = {}


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Collected only when tests/upstream (or a file in it) is named on the command line:
    a bare `pytest` or `make test` never starts these downloads."""
    named = [Path(a.split("::")[0]).resolve() for a in config.args]
    if any(p == HERE or HERE in p.parents for p in named):
        return None
    return True


def need(build: Callable[..., T], *args: Any) -> T:
    """An upstream artefact; a failed download fails the test with one clear line."""
    try:
        return build(*args)
    except fetch.FetchError as exc:
        pytest.fail(f"upstream download failed: {exc}", pytrace=False)


def record(row: str, check: str, result: str) -> None:
    previous = RESULTS.setdefault(row, {}).get(check)
    if previous and previous != "pass" and result == "pass":
        return  # a failure or note on another host of the row stays
    RESULTS[row][check] = result


@pytest.fixture(scope="session")
def serving_renders(tmp_path_factory: pytest.TempPathFactory) -> tuple[renders.ServingRender,
                                                                          ...]:
    for key, value in renders.GOLDEN_ENV.items():
        os.environ.setdefault(key, value)
    return renders.all_renders(tmp_path_factory.mktemp("variants"))


@pytest.fixture(scope="session")
def cpu_stack() -> Path:
    return need(venvs.cpu_stack)


def row_renders(all_renders: tuple[renders.ServingRender, ...], row: str,
                accelerator: str) -> list[renders.ServingRender]:
    found = [r for r in all_renders if r.vllm_row == row and r.accelerator == accelerator]
    assert found, f"no render covers vLLM {row} on {accelerator}"
    return found


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not RESULTS:
        return
    checks = sorted({c for row in RESULTS.values() for c in row})
    terminalreporter.section("upstream replay, per compat row")
    terminalreporter.write_line(" | ".join(["row", *checks]))
    for row in sorted(RESULTS, key=lambda r: [int(x) for x in r.split("-")[0].split(".")]
                      + [r], reverse=True):
        terminalreporter.write_line(" | ".join(
            [row, *(RESULTS[row].get(c, "-") for c in checks)]))
