"""A Site whose hosts Ansible reaches with its local connection: the real transport
(ansible-runner, the inventory, the shell module) without SSH."""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

from deploy_kit.config.site import Host, Site


def local_site(root: Path, hosts: list[Host]) -> Site:
    inventory = {"all": {"hosts": {h.name: {"ansible_connection": "local",
                                           "ansible_python_interpreter": sys.executable}
                                   for h in hosts}}}
    root.mkdir(parents=True, exist_ok=True)
    (root / "hosts.yml").write_text(yaml.safe_dump(inventory))
    return Site(name=root.name, root=root, hosts_file="hosts.yml",
                hosts={h.name: h for h in hosts}, secrets_locked=False)
