"""deploykit's verify checks for the run's inventory, in process on the controller, with the
run's vault secrets: the `deploykit verify --json` report, written to a file and returned."""

from __future__ import annotations

import json
import os
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ansible.plugins.action import ActionBase
from ansible_collections.deploykit.kvcache.plugins.module_utils.deploykit_controller import (
    failure,
    open_site,
)

# ansible-runner (AWX, AAP, ansible-navigator) names its job's artifact directory here
RUNNER_ARTIFACTS = "AWX_ISOLATED_DATA_DIR"


def default_report() -> Path:
    """The job's artifact directory under ansible-runner, else a new file in the temp dir."""
    artifacts = os.environ.get(RUNNER_ARTIFACTS)
    if artifacts and Path(artifacts).is_dir():
        return Path(artifacts) / "deploykit-verify.json"
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    return Path(tempfile.gettempdir()) / f"deploykit-verify-{stamp}-{os.getpid()}.json"


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True  # reads only
    _VALID_ARGS = frozenset({"inventory", "checks", "limit", "report", "storage_result"})

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result: dict[str, Any] = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        args = dict(self._task.args)
        try:
            from deploy_kit.verify import report
            from deploy_kit.verify.model import Status
            from deploy_kit.verify.run import verify_pass

            # as `deploykit verify --limit`: only the limited hosts are contacted
            done = verify_pass(open_site(args, task_vars, self._loader),
                               args.get("checks") or None, args.get("limit") or None,
                               Path(args.get("storage_result")
                                    or "runs/bench-storage/storage.json"))
            site, observation, findings = done.site, done.observation, done.findings
            text = report.to_json(findings, site.name)
            path = Path(args.get("report") or default_report())
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        except Exception as exc:  # every failure becomes the task's
            result.update(failure(exc))
            return result
        counts = {s.value: sum(1 for f in findings if f.status == s) for s in Status}
        failed = report.failed(findings)
        result.update(
            changed=False, schema=json.loads(text)["schema"], report_path=str(path),
            counts=counts, failed_checks=[f"{f.check} {f.target}: {f.message}" for f in failed],
            # not `unreachable`: a true value there would make Ansible call localhost so
            unreachable_hosts=dict(sorted(observation.unreachable.items())),
            probe_errors=list(observation.probe_errors),
            msg=" ".join(f"{n} {s}" for s, n in counts.items()) + f"; report: {path}")
        return result
