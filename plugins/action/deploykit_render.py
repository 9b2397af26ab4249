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
            from deploy_kit.flows.converge import tls_material
            from deploy_kit.ops.rundir import write_run_tree
            from deploy_kit.ops.tls import refuse_bad_ca

            site = open_site(args, task_vars, self._loader)
            refuse_bad_ca(site)  # the CA `up` would refuse
            # Ansible's local temp dir: ansible-playbook removes it when it exits, also
            # after a failed play, so no rendered site outlives the run
            parent = Path(args.get("parent") or C.DEFAULT_LOCAL_TMP)
            scratch = Path(tempfile.mkdtemp(prefix="deploykit-render-", dir=parent))
            out = scratch / "tree"
            # as `up` does; under the run's --check (this task itself runs with
            # check_mode: false, to render) nothing is written beside the inventory: the
            # would-be CA and certificates live in this run's scratch directory, which
            # Ansible removes
            issued, sources = tls_material(
                site, scratch / "tls" if task_vars.get("ansible_check_mode") else None)
            count = write_run_tree(site, out, sources)
        except Exception as exc:  # every failure becomes the task's
            result.update(failure(exc))
            return result
        result.update(changed=False, path=str(out), files=count, hosts=sorted(site.hosts),
                      issued=[i.host for i in issued if i.action in ("issued", "would issue")],
                      msg=f"rendered {count} files for {len(site.hosts)} hosts")
        return result
