"""Render the site on the controller, in process, with this run's inventory and secrets."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from ansible import constants as C
from ansible.plugins.action import ActionBase
from ansible_collections.deploykit.kvcache.plugins.module_utils.deploykit_controller import (
    failure,
    open_site,
)


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True  # scratch space on the controller, not a change to the site
    _VALID_ARGS = frozenset({"inventory", "parent"})

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result: dict[str, Any] = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        args = dict(self._task.args)
        try:
            from deploy_kit.ops.rundir import write_run_tree
            from deploy_kit.ops.tls import ensure_site_tls, refuse_bad_ca

            site = open_site(args, task_vars, self._loader)
            refuse_bad_ca(site)  # the CA `up` would refuse
            issued = ensure_site_tls(site)  # as `up` does, before any role copies a cert
            # Ansible's local temp dir: ansible-playbook removes it when it exits, also
            # after a failed play, so no rendered site outlives the run
            parent = Path(args.get("parent") or C.DEFAULT_LOCAL_TMP)
            out = Path(tempfile.mkdtemp(prefix="deploykit-render-", dir=parent))
            count = write_run_tree(site, out)
        except Exception as exc:  # every failure becomes the task's
            result.update(failure(exc))
            return result
        result.update(changed=False, path=str(out), files=count, hosts=sorted(site.hosts),
                      issued=[i.host for i in issued if i.action == "issued"],
                      msg=f"rendered {count} files for {len(site.hosts)} hosts")
        return result
