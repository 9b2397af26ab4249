"""A running LMCache that serves degraded, in its own journal (pure): the compiled extension
missing (KV copies on the pure-torch ops), the manager failed to start (every prefix
recomputed), a storage backend refused (no remote tier), or vLLM's MP connector without its
server. None of these stops vLLM answering, so only the journal shows them
(core/patterns.py DEGRADED_LOG_PATTERNS, read by the serving probe from each unit's running
process)."""

from __future__ import annotations

from collections.abc import Iterator

from deploy_kit.core.patterns import DEGRADED_LOG_PATTERNS
from deploy_kit.verify.model import Finding, Observation, S3LogEvent, ServingHost, Status, check

CID = "lmcache-degraded"


def _what(e: S3LogEvent, seen: ServingHost) -> tuple[str, str]:
    """The effect of one degraded kind and its fix."""
    torch = seen.versions.get("torch", "?")
    if e.kind == "extension":
        return (f"LMCache's compiled cuda_ops did not load under torch {torch}: KV copies run "
                "on its slow pure-torch fallback",
                "run the vLLM whose torch PyPI's LMCache was built against (`deploykit "
                "validate` names it), or set lmcache_wheel_dir to an LMCache built against "
                f"torch {torch}; then `deploykit up --limit {seen.name}`")
    if e.kind == "init":
        return ("LMCache failed to start in this process: vLLM recomputes every prefix",
                f"journalctl -u {e.unit} on {seen.name} shows the traceback after this line")
    if e.kind == "backend":
        return ("LMCache refused a configured storage backend and serves without it",
                f"journalctl -u {e.unit} on {seen.name}; `deploykit verify --check "
                "lmcache-s3-settings` and s3-credentials-valid name the usual causes")
    return ("vLLM's LMCache connector lost the LMCache server and has not re-registered: "
            "no KV is stored or read",
            f"systemctl status lmcache-server on {seen.name}; `deploykit up --limit "
            f"{seen.name}` restarts it")


@check(CID, tags=("lmcache", "vllm"),
       summary="no running vLLM or LMCache server logged a missing extension, a failed "
               "start, a refused backend or a lost server (its journal)")
def lmcache_degraded(obs: Observation) -> Iterator[Finding]:
    for seen in obs.serving:
        if not seen.reachable or seen.s3_log is None:
            continue
        events = [e for e in seen.s3_log if e.kind in DEGRADED_LOG_PATTERNS]
        for e in events:
            effect, fix = _what(e, seen)
            yield Finding(CID, Status.FAIL, seen.name,
                          f"{e.unit} at {e.when}: \"{e.text}\": {effect}", fix)
        if not events:
            yield Finding(CID, Status.PASS, seen.name,
                          "no degraded-mode line in the running units' journal")
