"""deploykit_rgw_key and the current-key rule (plugins/module_utils/deploykit_rgw_keys.py)
against a stand-in radosgw-admin that keeps an RGW user's keys in a file: `added` makes a
second key the current one with both valid, a re-run resumes instead of adding a third,
`pruned` leaves only the current one, check mode changes nothing, and no secret reaches
the output or a command line. tests/integration/test_rgw_access.py runs the same module
against a real radosgw."""

from __future__ import annotations

import json
import os
import stat
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from plugins.module_utils import deploykit_rgw_keys as rule
from tests.tools import ansible_module

UID = "dk-serving"

FAKE = textwrap.dedent('''\
    #!{python}
    """radosgw-admin's user info / key create / key rm, on a JSON file (and an argv log)."""
    import json, os, secrets, sys
    state = os.environ["FAKE_RGW_STATE"]
    with open(state + ".argv", "a") as log:
        log.write(json.dumps(sys.argv[1:]) + "\\n")
    args = sys.argv[3:]  # after --conf FILE
    users = json.load(open(state))
    def opt(name):
        return args[args.index(name) + 1]
    uid = opt("--uid")
    if uid not in users:
        sys.exit(22)
    user = users[uid]
    if args[:2] == ["key", "create"]:
        assert "--gen-secret" in args and "--secret-key" not in args
        user["keys"].append({{"user": uid, "access_key": opt("--access-key"),
                             "secret_key": secrets.token_hex(20)}})
    elif args[:2] == ["key", "rm"]:
        user["keys"] = [k for k in user["keys"] if k["access_key"] != opt("--access-key")]
    json.dump(users, open(state, "w"))
    print(json.dumps(user))
    ''')


@pytest.fixture
def rgw(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tool = bin_dir / "radosgw-admin"
    tool.write_text(FAKE.format(python=sys.executable))
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    state = tmp_path / "users.json"
    state.write_text(json.dumps({UID: {"user_id": UID, "keys": [
        {"user": UID, "access_key": "ZZLEGACYKEY000000001", "secret_key": "legacy-secret-1"},
        {"user": f"{UID}:sub", "access_key": "AASUBUSERKEY00000001", "secret_key": "sub-s"}]}}))
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_RGW_STATE", str(state))
    return state


def keys(state: Path) -> list[str]:
    return [k["access_key"] for k in json.loads(state.read_text())[UID]["keys"]
            if k["user"] == UID]


def run(state: Path, wanted: str, check: bool = False, ok: bool = True) -> dict[str, Any]:
    result = ansible_module("deploykit_rgw_key", {"uid": UID, "state": wanted,
                                                  "conf": "/dev/null"}, check=check, ok=ok)
    secrets = [k["secret_key"] for k in json.loads(state.read_text())[UID]["keys"]]
    assert not any(s in json.dumps({k: v for k, v in result.items() if k != "key"})
                   for s in secrets)
    return result


def test_a_rotation_adds_a_current_key_resumes_and_prunes_the_old_one(rgw: Path) -> None:
    first = run(rgw, "current")
    assert first["key"]["access_key"] == "ZZLEGACYKEY000000001" and not first["changed"]
    assert first["others"] == 0  # the subuser's key is not the user's
    assert run(rgw, "added", check=True)["changed"]  # check mode: reports, adds nothing
    assert keys(rgw) == ["ZZLEGACYKEY000000001"]
    added = run(rgw, "added")
    assert added["changed"] and not added["resumed"] and added["others"] == 1
    new = added["key"]["access_key"]
    assert rule.PATTERN.match(new) and keys(rgw) == ["ZZLEGACYKEY000000001", new]
    # the legacy key sorts after the new one, yet the new one is current for every reader
    assert run(rgw, "current")["key"]["access_key"] == new
    again = run(rgw, "added")  # a re-run of an interrupted rotation: nothing added
    assert not again["changed"] and again["resumed"] and keys(rgw) == ["ZZLEGACYKEY000000001", new]
    assert run(rgw, "pruned", check=True)["changed"] and len(keys(rgw)) == 2
    pruned = run(rgw, "pruned")
    assert pruned["changed"] and pruned["removed"] == 1 and keys(rgw) == [new]
    assert not run(rgw, "pruned")["changed"]
    # the next rotation adds a newer key than the last
    later = run(rgw, "added")["key"]["access_key"]
    assert later > new and rule.current_key(json.loads(rgw.read_text())[UID], UID)[
        "access_key"] == later
    # no secret on any radosgw-admin command line
    argv = Path(str(rgw) + ".argv").read_text()
    assert "--secret-key" not in argv and "legacy-secret-1" not in argv


def test_a_missing_user_fails_unless_missing_is_ok(rgw: Path) -> None:
    gone = ansible_module("deploykit_rgw_key", {"uid": "nobody", "conf": "/dev/null"}, ok=False)
    assert "does not exist" in gone["msg"]
    fine = ansible_module("deploykit_rgw_key", {"uid": "nobody", "conf": "/dev/null",
                                                "missing_ok": True})
    assert fine["key"] is None


def test_the_current_key_rule() -> None:
    info = {"keys": [{"user": UID, "access_key": "AAAA", "secret_key": "s1"},
                     {"user": UID, "access_key": "DK1700000000ABCDEFGH", "secret_key": "s2"},
                     {"user": UID, "access_key": "DK1800000000ABCDEFGH", "secret_key": "s3"}]}
    assert rule.current_key(info, UID)["secret_key"] == "s3"
    assert rule.current_key({"keys": info["keys"][:1]}, UID)["secret_key"] == "s1"
    assert rule.current_key({"keys": []}, UID) is None
    # a clock behind the newest key still gives a newer one
    assert rule.new_access_key(1600000000, info, UID).startswith("DK1800000001")
    assert len(rule.new_access_key(1900000000, info, UID)) == 20


def test_deploykit_and_the_modules_pick_the_same_key() -> None:
    from deploy_kit.core import rgw_keys

    cases = [[], ["AAAA"], ["ZZZZ", "DK1700000000ABCDEFGH"], ["DK1800000000ABCDEFGH",
             "DK1700000000ZZZZZZZZ", "BBBB"], ["dk1700000000abcdefgh", "CCCC"]]
    for access in cases:
        info = {"keys": [{"user": UID, "access_key": a, "secret_key": f"s-{a}"} for a in access]
                + [{"user": f"{UID}:sub", "access_key": "DK1999999999ZZZZZZZZ", "secret_key": "x"}]}
        assert rgw_keys.current_key(info, UID) == rule.current_key(info, UID), access
