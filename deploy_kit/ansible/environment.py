"""The variables deploykit adds to Ansible's environment, and nothing more.

Ansible finds its configuration the way it always does (ANSIBLE_CONFIG, ./ansible.cfg in
the working directory, ~/.ansible.cfg, /etc/ansible/ansible.cfg), so a project's forks,
remote_user, private_key_file, callbacks and [ssh_connection] apply to deploykit's runs as
to any ansible-playbook. deploykit adds only what its playbooks need and what it needs to
read Ansible's output; docs/ansible.md lists each variable and why.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

# What the playbooks need whatever the user's configuration says: playbooks/converged.yml
# names the group deploykit_converged, which exists only once a host is in it (deploykit
# refuses a --limit naming no host itself, before Ansible starts).
PLAYBOOK_VARIABLES = {"ANSIBLE_HOST_PATTERN_MISMATCH": "ignore"}
# What deploykit's own reading of the events needs: plain text in ansible.log and messages.
RUNNER_VARIABLES = {"ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0"}


def user_config() -> tuple[Path | None, Any]:
    """The configuration file Ansible would read from here (None: Ansible's defaults), and
    Ansible's ConfigManager over it and the environment."""
    from ansible.config.manager import ConfigManager, find_ini_config_file
    from ansible.errors import AnsibleError

    from deploy_kit.core.errors import EnvironmentProblem

    found = find_ini_config_file()
    try:
        return (Path(found) if found else None), ConfigManager(found)
    except AnsibleError as exc:  # Ansible itself would stop here too
        first = str(getattr(exc, "message", exc)).splitlines()[0]
        raise EnvironmentProblem(f"Ansible cannot read its configuration: {first}",
                                 hint="fix the file, or point ANSIBLE_CONFIG at another; "
                                      "`ansible-config dump --only-changed` shows what "
                                      "Ansible reads") from None


def collections_path(project: Path, manager: Any) -> str:
    """deploykit's collection first, then the user's collections_path (or Ansible's default
    ~/.ansible/collections:/usr/share/ansible/collections), so the user's own collections
    are still found."""
    home = manager.get_config_value("ANSIBLE_HOME")
    theirs = manager.get_config_value("COLLECTIONS_PATHS", variables={"ANSIBLE_HOME": home})
    ours = str(project / "collections")
    paths = [ours, *(str(p) for p in theirs or () if str(p) != ours)]
    return ":".join(paths)


def playbook_variables(project: Path, manager: Any = None) -> dict[str, str]:
    """What a plain ansible-playbook run of deploykit's playbooks needs (--print-command
    shows these): the deploykit.kvcache collection on the collections path, and the
    settings in PLAYBOOK_VARIABLES. `manager`: the user's configuration, when already read."""
    manager = manager if manager is not None else user_config()[1]
    return {"ANSIBLE_COLLECTIONS_PATH": collections_path(project, manager),
            **PLAYBOOK_VARIABLES}


def runner_variables(project: Path) -> dict[str, str]:
    """playbook_variables plus what a run through ansible-runner needs: plain output, and the
    user's host_key_checking stated explicitly (ansible-runner turns host key checking off
    unless ANSIBLE_HOST_KEY_CHECKING is set)."""
    _found, manager = user_config()
    checking = bool(manager.get_config_value("HOST_KEY_CHECKING"))
    return {**playbook_variables(project, manager), **RUNNER_VARIABLES,
            "ANSIBLE_HOST_KEY_CHECKING": "True" if checking else "False"}
