"""Shell scripts on inventory hosts through Ansible's own connection layer.

Every host contact outside a playbook (verify's reads, `cache`, `bench`, the round trip)
goes through here: one ansible-runner run per batch, with the inventory's connection
settings (ssh config and common args, bastions, `become`, connection plugins, forks) applied
by Ansible exactly as in `deploykit up`. Scripts travel base64-encoded on the module's
stdin, so no Jinja ever sees them and no argv length limit applies.
"""

from __future__ import annotations

import base64
import json
import os
import shlex
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deploy_kit.config.site import Host, Site
from deploy_kit.core.errors import DeployKitError

PLAY = """\
- name: deploykit reads hosts
  hosts: "{{ deploykit_shell_hosts }}"
  gather_facts: false
  tasks:
    - name: run deploykit's read-only scripts
      ansible.builtin.shell:
        cmd: base64 -d | /bin/sh
        stdin: "{{ deploykit_shell_scripts[item] }}"
      loop: "{{ deploykit_shell_jobs[inventory_hostname] }}"
      loop_control:
        label: "script {{ item }}"
      changed_when: false
      failed_when: false
      check_mode: false
      timeout: "{{ deploykit_shell_timeout }}"
"""


class TransportError(DeployKitError):
    """A host could not be reached, or its script could not run."""


@dataclass(frozen=True)
class ShellResult:
    host: str
    stdout: str = ""
    rc: int | None = None
    error: str | None = None  # unreachable, timed out: the script's output is not there
    stderr: str = ""

    def text(self, check: bool = True) -> str:
        """stdout; TransportError naming the host and Ansible's reason when the script could
        not run, or (with `check`) when it exited non-zero."""
        if self.error is not None:
            raise TransportError(f"{self.host}: {self.error}")
        if check and self.rc not in (0, None):
            last = next((ln for ln in reversed(self.stderr.splitlines()) if ln.strip()), "")
            raise TransportError(f"{self.host}: the script exited {self.rc}"
                                 + (f": {last.strip()[:300]}" if last else ""))
        return self.stdout


def run_many(site: Site, jobs: Sequence[tuple[Host, str]],
             timeout: float = 60.0) -> list[ShellResult]:
    """Run each (host, script) once, hosts in parallel (Ansible's forks), one host's scripts
    in order; results in the order of `jobs`."""
    if not jobs:
        return []
    per_host: dict[str, list[int]] = {}
    for index, (host, _script) in enumerate(jobs):
        per_host.setdefault(host.name, []).append(index)
    variables = {
        "deploykit_shell_hosts": ",".join(per_host),
        "deploykit_shell_jobs": per_host,
        "deploykit_shell_scripts": [base64.b64encode(s.encode()).decode() for _, s in jobs],
        "deploykit_shell_timeout": max(1, int(timeout)),
    }
    outcome = _run(site, variables, len(per_host))
    results = []
    for index, (host, _script) in enumerate(jobs):
        item = outcome.items.get(index)
        if item is not None:
            results.append(ShellResult(host.name, str(item.get("stdout", "")),
                                       item.get("rc"), _item_error(item),
                                       str(item.get("stderr", ""))))
        else:
            reason = outcome.host_errors.get(host.name) or \
                f"Ansible returned no result ({outcome.status})"
            results.append(ShellResult(host.name, error=reason))
    return results


def run_on(site: Site, host: Host, script: str, timeout: float = 60.0,
           check: bool = True) -> str:
    """One script on one host: its stdout, or TransportError (see ShellResult.text)."""
    return run_many(site, [(host, script)], timeout)[0].text(check)


def sections(output: str) -> dict[str, str]:
    """Split `### name` delimited output into {name: text}."""
    parts: dict[str, str] = {}
    current = None
    lines: list[str] = []
    for line in output.splitlines():
        if line.startswith("### "):
            if current is not None:
                parts[current] = "\n".join(lines)
            current, lines = line[4:].strip(), []
        else:
            lines.append(line)
    if current is not None:
        parts[current] = "\n".join(lines)
    return parts


@dataclass
class _Outcome:
    items: dict[int, dict[str, Any]]
    host_errors: dict[str, str]
    status: str


def _item_error(item: dict[str, Any]) -> str | None:
    # failed_when: false keeps a script's own non-zero exit a result; what is left is
    # Ansible failing to run the module at all (no usable Python on the host, a become
    # failure, a missing shell): then the result has no `cmd`
    if "cmd" in item:
        return None
    message = str(item.get("msg") or "Ansible could not run its shell module")
    detail = next((ln.strip() for ln in str(item.get("module_stderr", "")).splitlines()
                   if ln.strip()), "")
    if detail:
        message += f": {detail[:300]}"
    if "python" in message.lower() or "interpreter" in message.lower():
        message += " (set ansible_python_interpreter for this host)"
    return message


# reads are light: more hosts at once than a converge's forks (ansible.cfg), unless the
# operator set ANSIBLE_FORKS
READ_FORKS = 32


def _run(site: Site, variables: dict[str, Any], hosts: int) -> _Outcome:
    import ansible_runner

    from deploy_kit.ansible.runner import ansible_env

    items: dict[int, dict[str, Any]] = {}
    host_errors: dict[str, str] = {}

    def on_event(event: dict[str, Any]) -> bool:
        data = event.get("event_data") or {}
        host, res = data.get("host"), data.get("res") or {}
        kind = event.get("event")
        if kind == "runner_on_ok":
            for result in res.get("results", []):
                if isinstance(result.get("item"), int):
                    items[result["item"]] = result
        elif kind in ("runner_on_unreachable", "runner_on_failed") and host:
            host_errors[host] = _reason(res, unreachable=kind == "runner_on_unreachable")
        return False  # keep nothing on disk: outputs may hold a host's S3 keys

    # -f given to deploykit wins, then ANSIBLE_FORKS, then READ_FORKS (not ansible.cfg's
    # forks, which is sized for a converge)
    cmdline = list(site.connection)
    if "--forks" not in cmdline and "ANSIBLE_FORKS" not in os.environ:
        cmdline += ["--forks", str(max(1, min(hosts, READ_FORKS)))]
    with site.vault.materialized() as vault, \
            tempfile.TemporaryDirectory(prefix="deploykit-shell-") as private:
        cmdline += vault.argv
        os.chmod(private, 0o700)
        root = Path(private)
        (root / "play.yml").write_text(PLAY)
        extra = root / "vars.json"
        extra.touch(mode=0o600)
        extra.write_text(json.dumps(variables))
        cmdline += ["-e", f"@{extra}"]
        result = ansible_runner.run(
            # ansible-playbook runs in the user's working directory (./ansible.cfg applies)
            private_data_dir=private, project_dir=os.getcwd(), playbook=str(root / "play.yml"),
            inventory=[str(p) for p in site.inventory_sources], cmdline=shlex.join(cmdline),
            envvars={**ansible_env(), **vault.env},
            quiet=True, event_handler=on_event, rotate_artifacts=1, suppress_env_files=True)
    return _Outcome(items, host_errors, str(result.status))


def _reason(res: dict[str, Any], unreachable: bool) -> str:
    # a loop's aggregate says "All items completed": the first item has the real reason
    first_item: dict[str, Any] = next(iter(res.get("results") or []), {})
    message = str(first_item.get("msg") or res.get("msg") or res.get("stderr")
                  or "no message").strip()
    first = message.splitlines()[0] if message else "no message"
    return f"{'unreachable' if unreachable else 'failed'} through Ansible: {first[:300]}"
