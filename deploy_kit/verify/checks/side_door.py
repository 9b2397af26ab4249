"""The serving edge has no side door: vLLM's unguarded paths are refused on every
instance's public address (probes/side_door_probe.py).

A refusal is an HTTP 401, 403, 404 or 405 (the serving front's, or vLLM's own on /v1), or a
refused connection: no completion can be had either way. Any other answer (200, 400, 422:
vLLM parsed the body, so the path reached it), a timeout or a reset mid-request fails.
The keyed /v1/completions is exercised by cache-hits (every instance answers a keyed
prompt there)."""

from __future__ import annotations

from collections.abc import Iterator

from deploy_kit.verify.model import (
    GUARDED,
    SIDE_DOORS,
    Finding,
    Observation,
    SideDoorProbe,
    Status,
    check,
)

CHECK = "vllm-no-side-door"
REFUSED = frozenset({401, 403, 404, 405})


def refused(probe: SideDoorProbe, path: str) -> bool:
    return path in probe.closed or probe.answers.get(path) in REFUSED


def _answer(probe: SideDoorProbe, path: str) -> str:
    status = probe.answers.get(path)
    return f"{path} {status}" if status is not None else \
        f"{path} no answer ({probe.errors.get(path, '?')})"


def judge(probe: SideDoorProbe) -> Finding:
    """One instance's finding: FAIL naming every path that was not refused."""
    target = f"{probe.endpoint} ({probe.address}:{probe.port})"
    doors = list(SIDE_DOORS) + ([GUARDED] if probe.keyed else [])
    open_doors = [p for p in doors if not refused(probe, p)]
    if open_doors:
        return Finding(CHECK, Status.FAIL, target,
                       "answered without the API key: " + ", ".join(
                           _answer(probe, p) for p in open_doors)
                       + " (expected 401/403/404/405 or a refused connection)",
                       "run `deploykit up` (vLLM on loopback behind vllm-front); on the host: "
                       "`ss -ltnp` shows who holds the port, `systemctl status vllm-front`")
    if all(p in probe.closed for p in doors):
        return Finding(CHECK, Status.WARN, target,
                       f"nothing listens on :{probe.port} (no completion either way)",
                       "vllm-service says whether the instance should run; "
                       "`systemctl status vllm-front` on the host")
    codes = ", ".join(f"{p} {probe.answers.get(p) or 'closed'}" for p in doors)
    keyless = "" if probe.keyed else \
        f"; {GUARDED} {probe.answers.get(GUARDED)}: served without a key by the site's choice " \
        "(vllm_api_key_required false)"
    return Finding(CHECK, Status.PASS, target, f"refused without the key: {codes}{keyless}")


@check(CHECK, tags=("vllm",), summary="every vLLM instance's public address refuses "
       "/invocations, /pooling, /score, /rerank, /classify and /v1/completions without the "
       "API key")
def no_side_door(obs: Observation) -> Iterator[Finding]:
    for probe in obs.side_doors:
        yield judge(probe)
