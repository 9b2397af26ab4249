"""A run whose secrets are not the running site's is refused before any host changes:
playbooks/secrets_agree.yml (the first host play of `up`, the rotations and `remove`) run
through ansible-playbook on three local hosts (a Consul server, a gateway, a serving host),
each with its files under a temp root and the secrets handed over as deploykit hands them
(deploykit_generated_secrets in an extra-vars file). A play after it writes a marker: the
marker, and the hosts' files byte for byte, say whether anything ran after the check. The
first Consul server's API is a stand-in that knows one management token, the tokens and a
keyring."""

from __future__ import annotations

import base64
import hashlib
import http.server
import json
import os
import re
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
import yaml

from deploy_kit.render.templating import env_quote
from tests.conftest import REPO

HOSTS = {"srv": "consul_servers", "gw": "rgw", "gpu": "vllm"}


def gossip() -> str:
    return base64.b64encode(os.urandom(32)).decode()


def site_secrets() -> dict[str, str]:
    return {"vllm_api_key": "k$" + uuid.uuid4().hex, "consul_gossip_key": gossip(),
            **{f"consul_acl_{t}_token": str(uuid.uuid4())
               for t in ("management", "agent", "service", "dns")}}


class FakeConsul(http.server.BaseHTTPRequestHandler):
    """/v1/acl/token/self answers 200 for a known token, 403 otherwise; the keyring lists
    `keys` to the management token. No management token: a Consul that has not started
    (500, no leader), which decides nothing."""

    tokens: ClassVar[set[str]] = set()
    management: ClassVar[str] = ""
    keys: ClassVar[list[str]] = []
    port: ClassVar[int] = 0
    acl: ClassVar[bool] = True  # False: ACLs off (401 on the ACL API, the keyring open)

    def do_GET(self) -> None:
        token = self.headers.get("X-Consul-Token", "")
        if not self.management:
            self._answer(500, "No cluster leader")
        elif not self.acl:
            self._answer(*((200, [{"WAN": False, "Keys": {k: 3 for k in self.keys}}])
                           if self.path == "/v1/operator/keyring" else
                           (401, "ACL support disabled")))
        elif self.path == "/v1/acl/token/self":
            ok = token in self.tokens or token == self.management
            self._answer(200 if ok else 403, {"AccessorID": "a"} if ok else "ACL not found")
        elif self.path == "/v1/operator/keyring" and token == self.management:
            self._answer(200, [{"WAN": False, "Keys": {k: 3 for k in self.keys}},
                               {"WAN": True, "Keys": {gossip(): 1}}])
        else:
            self._answer(403, "Permission denied")

    def _answer(self, code: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def consul() -> Iterator[type[FakeConsul]]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FakeConsul)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    FakeConsul.port = server.server_address[1]
    FakeConsul.tokens, FakeConsul.management, FakeConsul.keys = set(), "", []
    FakeConsul.acl = True
    try:
        yield FakeConsul
    finally:
        server.shutdown()


class Site:
    """Three local hosts, each with its own root for the files the roles write."""

    def __init__(self, tmp: Path, port: int, acl: bool = True) -> None:
        self.tmp = tmp
        render = tmp / "rendered"
        (render / "_cluster" / ".deploykit").mkdir(parents=True)
        (render / "_cluster" / ".deploykit" / "site.json").write_text("{}")
        for host, group in HOSTS.items():
            root = tmp / host
            root.mkdir()
            settings = {"_deploykit_settings_loaded": True, "deploykit_dns_mode": "consul",
                        "consul_acl_enabled": acl, "consul_gossip_encryption": True,
                        "consul_http_port": port,
                        "_consul_secrets_path": str(root / "consul-secrets.json"),
                        "_vllm_has_api_key": group == "vllm",
                        "_vllm_secret_env_path": str(root / "vllm-secret.env"),
                        "_vllm_api_keys_path": str(root / "vllm-api-keys.yaml")}
            (render / host / ".deploykit").mkdir(parents=True)
            (render / host / ".deploykit" / "settings.json").write_text(json.dumps(settings))
        python = f"ansible_connection=local ansible_python_interpreter={sys.executable}"
        (tmp / "hosts.ini").write_text("".join(f"[{g}]\n{h} {python}\n"
                                               for h, g in HOSTS.items()))
        (tmp / "play.yml").write_text(yaml.safe_dump([
            {"ansible.builtin.import_playbook": str(REPO / "playbooks" / "secrets_agree.yml")},
            {"hosts": "all", "gather_facts": False, "tasks": [
                {"name": "Mark that a later play ran", "ansible.builtin.file": {
                    "path": str(tmp / "marker-{{ inventory_hostname }}"), "state": "touch",
                    "mode": "0644"}}]}]))

    def converge(self, values: dict[str, str], host: str = "") -> None:
        """Write what a converge with `values` leaves on the hosts (all, or one)."""
        for name in [host] if host else list(HOSTS):
            root = self.tmp / name
            tokens = {"agent": values["consul_acl_agent_token"],
                      "config_file_service_registration": values["consul_acl_service_token"],
                      "default": values["consul_acl_dns_token"]}
            if name == "srv":
                tokens["initial_management"] = values["consul_acl_management_token"]
            if name != "gpu":
                (root / "consul-secrets.json").write_text(json.dumps(
                    {"acl": {"tokens": tokens}, "encrypt": values["consul_gossip_key"]}))
            else:
                quoted = env_quote(values["vllm_api_key"])  # as the serving role writes it
                (root / "vllm-secret.env").write_text(f"VLLM_API_KEY={quoted}\n")
                (root / "vllm-api-keys.yaml").write_text("{}\n")

    def digest(self) -> dict[str, str]:
        return {str(p.relative_to(self.tmp)): hashlib.sha256(p.read_bytes()).hexdigest()
                for host in HOSTS for p in sorted((self.tmp / host).iterdir())}

    def run(self, values: dict[str, str], *args: str) -> tuple[bool, str]:
        """(every host passed and the later play ran, output) of one run holding `values`."""
        for marker in self.tmp.glob("marker-*"):
            marker.unlink()
        extra = self.tmp / "generated.json"
        extra.write_text(json.dumps({"deploykit_generated_secrets": values}))
        extra.chmod(0o600)
        env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
               "ANSIBLE_LOCALHOST_WARNING": "false", "ANSIBLE_NOCOLOR": "1"}
        done = subprocess.run(
            [str(Path(sys.executable).parent / "ansible-playbook"), "-i",
             str(self.tmp / "hosts.ini"), str(self.tmp / "play.yml"), "-e",
             f"deploykit_render_dir={self.tmp / 'rendered'}", "-e", f"@{extra}", *args],
            capture_output=True, text=True, timeout=300, cwd=REPO, env=env)
        out = done.stdout + done.stderr
        for value in values.values():
            assert value not in out, "a secret value reached Ansible's output"
        ran = sorted(m.name for m in self.tmp.glob("marker-*"))
        assert ran in ([], [f"marker-{h}" for h in sorted(HOSTS)]), ran
        assert (done.returncode == 0) == bool(ran), out[-3000:]
        return bool(ran), out


def refusals(out: str) -> dict[str, str]:
    """host: the line refusing it."""
    found = (re.search(r"\b(\w+) runs other values of", ln) for ln in out.splitlines()
             if "than this run holds" in ln)
    return {m.group(1): m.string for m in found if m}


def test_a_new_site_passes_and_the_same_secrets_pass_again(tmp_path: Path,
                                                           consul: type[FakeConsul]) -> None:
    site = Site(tmp_path, consul.port)
    values = site_secrets()
    ok, out = site.run(values)  # never converged: nothing to compare
    assert ok, out[-3000:]
    site.converge(values)
    consul.management, consul.keys = values["consul_acl_management_token"], \
        [values["consul_gossip_key"]]
    ok, out = site.run(values)
    assert ok, out[-3000:]


def test_a_second_controller_with_new_secrets_is_refused_before_anything_changes(
        tmp_path: Path, consul: type[FakeConsul]) -> None:
    site = Site(tmp_path, consul.port)
    running = site_secrets()
    site.converge(running)
    consul.management, consul.keys = running["consul_acl_management_token"], \
        [running["consul_gossip_key"]]
    consul.tokens = {running[f"consul_acl_{t}_token"] for t in ("agent", "service", "dns")}
    before = site.digest()
    fresh = site_secrets()  # what a controller without the store generates
    for args in ((), ("--check",)):
        ok, out = site.run(fresh, *args)
        assert not ok
        refused = refusals(out)
        assert set(refused) == set(HOSTS), out[-3000:]
        assert "consul_acl_management_token" in refused["srv"]
        assert "consul_gossip_key" in refused["gw"] and "consul_acl_agent_token" in refused["gw"]
        assert "vllm_api_key" in refused["gpu"] and "consul" not in refused["gpu"]
        assert "deploykit secrets rotate consul-tokens" in refused["gw"]
        assert ".deploykit-secrets" in refused["gpu"]
        assert site.digest() == before
    # the site's own secrets with one of them changed in the vault: that one is named
    ok, out = site.run(running | {"vllm_api_key": "k-other"})
    assert not ok and set(refusals(out)) == {"gpu"}, out[-3000:]
    assert site.digest() == before


def test_consul_answers_for_the_cluster_and_repairs_a_file_an_earlier_run_overwrote(
        tmp_path: Path, consul: type[FakeConsul]) -> None:
    site = Site(tmp_path, consul.port)
    running, stray = site_secrets(), site_secrets()
    site.converge(running)
    site.converge(stray | {"vllm_api_key": running["vllm_api_key"]}, host="gw")  # overwritten
    site.converge(stray, host="srv")
    consul.management, consul.keys = running["consul_acl_management_token"], \
        [running["consul_gossip_key"]]
    consul.tokens = {running[f"consul_acl_{t}_token"] for t in ("agent", "service", "dns")}
    ok, out = site.run(running)  # Consul accepts every value: the files are stale
    assert ok, out[-3000:]
    # the stray values match the overwritten files, but Consul refuses the management token
    ok, out = site.run(stray | {"vllm_api_key": running["vllm_api_key"]})
    assert not ok
    assert "consul_acl_management_token" in refusals(out)["srv"], out[-3000:]
    # Consul stopped: the files decide
    consul.management = ""
    ok, out = site.run(running)
    assert not ok and set(refusals(out)) == {"srv", "gw"}, out[-3000:]


def test_during_a_rotation_the_current_and_the_next_value_are_accepted(
        tmp_path: Path, consul: type[FakeConsul]) -> None:
    site = Site(tmp_path, consul.port)
    old = site_secrets()
    new = site_secrets()
    site.converge(old)
    site.converge(old | {"consul_gossip_key": new["consul_gossip_key"],
                         "consul_acl_agent_token": new["consul_acl_agent_token"]}, host="gw")
    rotating = old | {"consul_gossip_key_next": new["consul_gossip_key"],
                      "consul_acl_agent_token_next": new["consul_acl_agent_token"],
                      "vllm_api_key_next": new["vllm_api_key"]}
    ok, out = site.run(rotating)
    assert ok, out[-3000:]
    # vLLM: a key the host accepts beside its own (its key list) counts as running
    (tmp_path / "gpu" / "vllm-api-keys.yaml").write_text(json.dumps(
        {"api-key": [old["vllm_api_key"], new["vllm_api_key"]]}))
    finished = {k: v for k, v in rotating.items() if k != "vllm_api_key_next"}
    ok, out = site.run(finished | {"vllm_api_key": new["vllm_api_key"]})
    assert ok, out[-3000:]
    (tmp_path / "gpu" / "vllm-api-keys.yaml").write_text("{}\n")  # its list dropped again
    ok, out = site.run(finished | {"vllm_api_key": new["vllm_api_key"]})
    assert not ok and set(refusals(out)) == {"gpu"}, out[-3000:]


def test_without_acls_the_keyring_answers_for_the_gossip_key(
        tmp_path: Path, consul: type[FakeConsul]) -> None:
    """The vault's way to change the key: `consul keyring -install/-use` on the cluster,
    then the vault, then `up`: the keyring holds the new key, the files still the old."""
    site = Site(tmp_path, consul.port, acl=False)
    old = site_secrets()
    site.converge(old)
    consul.acl, consul.management = False, "running"
    changed = old | {"consul_gossip_key": gossip()}
    consul.keys = [old["consul_gossip_key"]]
    ok, out = site.run(changed)  # not in the cluster's keyring: refused
    assert not ok and set(refusals(out)) == {"srv", "gw"}, out[-3000:]
    consul.keys = [old["consul_gossip_key"], changed["consul_gossip_key"]]
    ok, out = site.run(changed)
    assert ok, out[-3000:]


def test_a_secret_this_run_cannot_read_stops_every_host(tmp_path: Path,
                                                        consul: type[FakeConsul]) -> None:
    """An inline vault value without its password fails on its host only: the check turns
    that into a refusal of the whole run, so no other host goes on to change."""
    from tests.unit.test_vault import encrypt

    site = Site(tmp_path, consul.port)
    values = site_secrets()
    site.converge(values)
    before = site.digest()
    cipher = encrypt("k-vaulted")
    (tmp_path / "host_vars").mkdir()
    (tmp_path / "host_vars" / "gpu.yml").write_text(
        "vllm_api_key: !vault |\n" + "".join(f"  {ln}\n" for ln in cipher.splitlines()))
    ok, out = site.run({k: v for k, v in values.items() if k != "vllm_api_key"})
    assert not ok, out[-3000:]
    assert "gpu: the secrets this run would install could not be read" in out, out[-3000:]
    assert site.digest() == before
