"""The lab as an operator's fleet describes it: an INI inventory whose hosts are reachable
only through ssh_config aliases (`ansible_host` names the alias, `deploykit_address` the
service address, `ansible_ssh_common_args: -F <file>`), one host reached as a sudo user with
become, group_vars beside the file. Through Ansible's inventory and connection layer alone,
deploykit validates it, converges it in check mode with nothing to change (so every file
rendered from it equals the lab's), and verifies it green."""

from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.lab.conftest import LAB_INVENTORY, LAB_KEY, Lab, runs_dirs

pytestmark = pytest.mark.lab


def _alias(name: str) -> str:
    return f"dk-{name}.fleet"  # no resolver knows it: only the ssh_config below does


def _ini_value(value: Any) -> str:
    text = json.dumps(value) if isinstance(value, bool) else str(value)
    return shlex.quote(text)


def write_alias_inventory(root: Path) -> Path:
    """inventory/lab rewritten as a fleet would have it: INI + ssh_config + group_vars."""
    lab = LAB_INVENTORY
    doc = yaml.safe_load((lab / "hosts.yml").read_text())["all"]
    root.mkdir(parents=True)
    ssh_config = root / "ssh_config"
    config_lines: list[str] = []
    sections: list[str] = []
    host_vars = root / "host_vars"
    group_vars = root / "group_vars"
    host_vars.mkdir()
    shutil.copytree(lab / "group_vars", group_vars)
    # the secrets `up` generated and the site's identity belong to the site as its vault
    # does: the committed vault file (a local store, where one is left: modes kept)
    for name in (".deploykit-secrets.vault.yml", ".deploykit-site.yml"):
        if (lab / name).is_file():
            shutil.copy2(lab / name, root / name)
    if (lab / ".deploykit-secrets").is_dir():
        shutil.copytree(lab / ".deploykit-secrets", root / ".deploykit-secrets")
    seen: set[str] = set()
    for group, body in doc["children"].items():
        lines = [f"[{group}]"]
        for name, entry in body["hosts"].items():
            entry = dict(entry)
            if entry.get("ansible_connection") == "local":  # the controller (ceph admin)
                if name not in seen:
                    (host_vars / f"{name}.yml").write_text(yaml.safe_dump(entry))
                lines.append(name)
                seen.add(name)
                continue
            user = entry.pop("ansible_user", doc["vars"]["ansible_user"])
            address = entry.pop("ansible_host")
            if name not in seen:
                config_lines += [f"Host {_alias(name)}", f"  HostName {address}",
                                 f"  User {user}", f"  IdentityFile {LAB_KEY}",
                                 "  IdentitiesOnly yes", "  StrictHostKeyChecking no",
                                 "  UserKnownHostsFile /dev/null", "  LogLevel ERROR", ""]
            entry |= {"ansible_host": _alias(name), "deploykit_address": address}
            lines.append(" ".join([name, *(f"{k}={_ini_value(v)}" for k, v in entry.items())]))
            seen.add(name)
        if body.get("vars"):
            (group_vars / f"{group}.yml").write_text(yaml.safe_dump(body["vars"]))
        sections.append("\n".join(lines))
    ssh_config.write_text("\n".join(config_lines))
    ssh_config.chmod(0o600)
    sections.append("[all:vars]\n"
                    f"ansible_ssh_common_args={shlex.quote(f'-F {ssh_config}')}\n"
                    "ansible_python_interpreter=/usr/bin/python3")
    ini = root / "hosts.ini"
    ini.write_text("\n\n".join(sections) + "\n")
    return ini


def test_an_ini_inventory_behind_ssh_aliases_validates_converges_and_verifies(
        converged: Lab, tmp_path: Path) -> None:
    ini = write_alias_inventory(tmp_path / "lab")  # the same site name: the same renders
    text = ini.read_text()
    assert "ansible_user" not in text and "10.99.0.14" in text and "ansible_become" in text
    converged.deploykit("validate", "-i", str(ini))

    before = set(runs_dirs())
    converged.deploykit("up", "-i", str(ini), "--check")
    summary = json.loads((sorted(set(runs_dirs()) - before)[-1] / "summary.json").read_text())
    assert summary["rc"] == 0 and not summary["failed"], summary["failed"]
    assert summary["changed"] == 0, summary["changed_tasks"]
    assert {"lab1", "lab2", "lab3", "lab4"} <= set(summary["hosts"]), summary["hosts"]

    result = converged.deploykit("verify", "-i", str(ini), "--json", check=False)
    findings = json.loads(result.stdout)["findings"]
    bad = [f for f in findings if f["status"] in ("fail", "skip")]
    assert result.returncode == 0 and not bad, bad
    serving = {f["target"] for f in findings
               if f["check"] == "vllm-service" and f["status"] == "pass"}
    assert {"lab3/0", "lab3/1", "lab4"} <= serving, serving  # lab3 runs two instances
