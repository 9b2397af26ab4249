"""Is the remote tier fast enough to beat recompute? `plan`'s break-even bandwidth per
serving group against the GET throughput `bench storage` last measured."""

from __future__ import annotations

from collections.abc import Iterator

from deploy_kit.plan.breakeven import losing_contexts
from deploy_kit.verify.model import Finding, Observation, Status, check


@check("storage-breakeven", tags=("s3", "plan"), severity="warning",
       summary="the measured GET throughput per serving host beats recompute (plan's break-even)")
def storage_breakeven(obs: Observation) -> Iterator[Finding]:
    for group in obs.serving_groups:
        target = f"{group.model} on {group.device} ({', '.join(group.hosts)})"
        measured = obs.storage
        if measured is None:  # said, with the figures a measurement will be held against
            first = group.rows[0] if group.rows else None
            needs = (f"; remote KV beats recompute above {first.breakeven_storage_gbps:.1f} "
                     f"Gbit/s per host at {first.context_tokens // 1024}K"
                     if first is not None and first.breakeven_storage_gbps is not None else "")
            yield Finding("storage-breakeven", Status.INFO, target,
                          f"no `deploykit bench storage` result for this site to compare "
                          f"with plan's break-even bandwidth{needs}",
                          "run `deploykit bench storage -i <site>` (runs/bench-storage/)")
            continue
        where = (f"GET {measured.measured_gbps:.1f} Gbit/s measured from "
                 f"{measured.measured_from} at {measured.generated}")
        losing = losing_contexts(group, measured.measured_gbps)
        if not losing:
            yield Finding("storage-breakeven", Status.PASS, target,
                          f"{where}: remote KV beats recompute at every planned context length")
            continue
        first = next(r for r in group.rows if r.context_tokens == losing[0])
        yield Finding("storage-breakeven", Status.FAIL, target,
                      f"{where}: remote KV loses to recompute at "
                      f"{', '.join(f'{t // 1024}K' for t in losing)} tokens (break-even at "
                      f"{losing[0] // 1024}K: {first.breakeven_storage_gbps:.1f} Gbit/s)",
                      "more gateways or faster networks per serving host, or expect remote "
                      "hits to pay off only above those lengths (`deploykit plan`)")
