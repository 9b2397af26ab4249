"""Rotating secrets under load (docs/day2.md, "Rotating secrets"): while a
client keeps sending fresh prompts, `deploykit secrets rotate -i lab s3 --yes` gives the
serving hosts a new S3 key one host at a time and deletes the old one, with no failed
prompt; RGW then refuses the old key, the hosts' credential files hold the new one, and
LMCache still stores and loads through it. Then the vLLM API key: both keys accepted after
the first step, only the new one after --finish, again with no failed prompt.

The lab's serving hosts are CPU hosts, where a host restarts whole (its instances require
the LMCache server: roles/serving/tasks/roll.yml), so a host serves nothing for a minute or
two while the other serves. A client of a real fleet reaches the hosts through a balancer
that sends nothing to a host whose /health fails and retries a request that a stopping
host dropped on another one (HAProxy `option redispatch` + `retry-on conn-failure`); the
client here does the same (BalancedPrompts), and a prompt fails only if no host answers it.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable

from deploy_kit.config.s3_identities import serving_uid
from deploy_kit.core.rgw_keys import current_key
from deploy_kit.transport.sigv4 import Credentials, request
from deploy_kit.verify.probes.s3_probe import listing
from tests.lab.conftest import CEPH_CONF, LAB_INVENTORY, VAULT_PASSWORD, Lab, lab_model_on_host
from tests.lab.load import FreshPrompts
from tests.lab.vllm_http import SERVING, api_key, complete, get

GATEWAY, BUCKET_HOST = "10.99.0.11", "lmcache.s3.lab.test"
CREDENTIALS = "/etc/deploykit/aws/credentials"


class BalancedPrompts(FreshPrompts):
    """FreshPrompts through a balancer's eyes: each prompt goes to the next host whose
    /health answers 200, and a request that fails there is retried on the other hosts; a
    prompt fails (errors) only when every host failed it. `retried` counts the retries."""

    def __init__(self) -> None:
        super().__init__()
        self.retried = 0
        self.turn = 0

    def run(self) -> None:
        names = list(self.hosts)
        while not self.stop.is_set():
            self.turn += 1
            order = names[self.turn % len(names):] + names[:self.turn % len(names)]
            prompt = [self.rng.randrange(3, 259) for _ in range(256 * 2 + 5)]
            tried: list[str] = []
            for name in order:
                address = self.hosts[name]
                if get(f"http://{address}:8000/health", 2) != 200:
                    continue
                try:
                    complete(address, prompt)
                    self.sent += 1
                    break
                except OSError as exc:
                    tried.append(f"{name}: {exc}")
                    self.retried += 1
            else:
                if tried:
                    self.errors.append("; ".join(tried))
                else:  # no host healthy at this instant: a balancer would queue; wait
                    time.sleep(1)


def rgw_user(uid: str) -> dict:
    return json.loads(subprocess.run(
        ["radosgw-admin", "--conf", CEPH_CONF, "user", "info", "--uid", uid],
        check=True, capture_output=True, text=True).stdout)


def s3_get(key: dict[str, str], path: str, query: str = "") -> tuple[int, bytes]:
    return request(GATEWAY, 80, "GET", path, BUCKET_HOST, "default",
                   Credentials(key["access_key"], key["secret_key"]), query=query, timeout=30)


def models_status(address: str, key: str, port: int) -> int:
    req = urllib.request.Request(f"http://{address}:{port}/v1/models",
                                 headers={"Authorization": f"Bearer {key}"})
    try:
        with urllib.request.urlopen(req, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def store() -> dict[str, str]:
    """The lab's generated secrets: its vault file, opened with the lab's vault."""
    from pathlib import Path

    from deploy_kit.ops.secrets_store import read_store
    from deploy_kit.ops.site import open_site

    return read_store(open_site(str(LAB_INVENTORY), Path(VAULT_PASSWORD)))


def under_load(action: Callable[[], object]) -> tuple[BalancedPrompts, float]:
    start = time.monotonic()
    with BalancedPrompts() as load:
        time.sleep(5)  # the load runs before the rotation starts
        action()
        time.sleep(5)  # and after it ended
    return load, time.monotonic() - start


def test_rotating_the_s3_keys_under_load_fails_no_prompt(converged: Lab) -> None:
    # the lab serves one model: its identity is the one every serving host holds
    uid = serving_uid("lmcache", lab_model_on_host())
    probe = listing(f"{lab_model_on_host()}@")  # a listing of its own model's keys
    old_serving = current_key(rgw_user(uid), uid)
    old_owner = current_key(rgw_user("lmcache"), "lmcache")
    assert old_serving and old_owner
    assert s3_get(old_serving, "/", probe)[0] == 200  # valid before

    load, seconds = under_load(
        lambda: converged.deploykit("secrets", "rotate", "--inventory", "lab", "s3", "--yes"))
    print(f"s3 rotation under load: {seconds:.0f} s, {load.sent} prompts answered, "
          f"{load.retried} retried on the other host, {len(load.errors)} failed")
    assert not load.errors, load.errors[:5]
    assert load.sent >= 10

    serving_user = rgw_user(uid)
    new = current_key(serving_user, uid)
    assert new and new["access_key"] != old_serving["access_key"]
    assert [k["access_key"] for k in serving_user["keys"]] == [new["access_key"]]
    new_owner = current_key(rgw_user("lmcache"), "lmcache")
    assert new_owner and new_owner["access_key"] != old_owner["access_key"]
    # RGW refuses the old keys, takes the new one
    status, body = s3_get(old_serving, "/", probe)
    assert status == 403 and b"InvalidAccessKeyId" in body, (status, body[:300])
    assert s3_get(old_owner, "/")[0] == 403
    assert s3_get(new, "/", probe)[0] == 200
    for name, address in SERVING.items():
        profile = converged.ssh(address, f"cat {CREDENTIALS}")
        assert new["access_key"] in profile and old_serving["access_key"] not in profile, name
        assert converged.ssh(address, f"stat -c %a {CREDENTIALS}").strip() == "600"
    # nothing printed a secret
    printed = "\n".join(converged.outputs)
    assert new["secret_key"] not in printed and old_serving["secret_key"] not in printed
    # LMCache stores and loads through the new key: verify's remote-tier check
    result = converged.deploykit("verify", "--inventory", "lab", "--check",
                                 "lmcache-remote-tier", "--json", check=False)
    findings = json.loads(result.stdout)["findings"]
    assert result.returncode == 0 and findings, findings
    assert all(f["status"] != "fail" for f in findings), findings
    # a second rotation right after needs nothing resumed: a new key again, still one
    again = converged.deploykit("secrets", "rotate", "--inventory", "lab", "s3", "--check")
    assert again.returncode == 0


def test_rotating_the_vllm_api_key_under_load_fails_no_prompt(converged: Lab) -> None:
    ports = {"lab3": (8000, 8001), "lab4": (8000,)}
    old = store()["vllm_api_key"]
    load, first = under_load(lambda: converged.deploykit(
        "secrets", "rotate", "--inventory", "lab", "vllm-api-key", "--yes"))
    new = store()["vllm_api_key_next"]
    assert store()["vllm_api_key"] == old and new != old
    for name, address in SERVING.items():  # every instance accepts both
        for port in ports[name]:
            assert models_status(address, old, port) == 200, (name, port)
            assert models_status(address, new, port) == 200, (name, port)
    assert not load.errors, load.errors[:5]
    sent = load.sent
    # the clients move (the test's client reads the store), then --finish
    load, second = under_load(lambda: converged.deploykit(
        "secrets", "rotate", "--inventory", "lab", "vllm-api-key", "--finish", "--yes"))
    print(f"vllm key rotation under load: {first:.0f} s + {second:.0f} s, "
          f"{sent + load.sent} prompts answered, {load.retried} retried, "
          f"{len(load.errors)} failed")
    assert not load.errors, load.errors[:5]
    assert store()["vllm_api_key"] == new and "vllm_api_key_next" not in store()
    assert api_key(SERVING["lab3"]) == new
    for name, address in SERVING.items():
        for port in ports[name]:
            assert models_status(address, old, port) == 401, (name, port)
            assert models_status(address, new, port) == 200, (name, port)
    assert old not in "\n".join(converged.outputs) and new not in "\n".join(converged.outputs)
    for address in SERVING.values():  # vLLM logs its arguments with the keys redacted
        found = converged.ssh(address, "journalctl -u 'vllm*' --no-pager > /tmp/dk-j; "
                                       "grep -cFf - /tmp/dk-j; rm -f /tmp/dk-j; true",
                              stdin=f"{old}\n{new}\n")
        assert found.strip() == "0", address
