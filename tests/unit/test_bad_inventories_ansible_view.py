"""deploykit validates what Ansible reads, bounded (defect classes 1, 10 and 11 of the
2026-12-06 audit, review-2026-12-06/reliability.md §2).

- Class 1: the group_vars/host_vars files Ansible reads (its find_vars_files: `all`
  hides `all.yml`, directories recurse, `.json` counts) and every inventory source in a
  directory (a second hosts file, an INI file, a script) are what deploykit validates.
  Ansible's own code is the oracle for both discovery rules.
- Class 11: Ansible's inventory API runs in a child with a time and a memory limit: a
  script that never returns, prints without end, or an alias bomb in an INI inventory's
  group_vars is one exit-3 line, not a hang or a MemoryError.
- Class 10: edge values (huge integers, YAML 1.1 oddities, timestamps, binaries,
  invisible characters, overlong strings) in every setting give exit 0 or 3, never a
  traceback or exit 1; what lax typing would coerce silently is refused by name.

Cases use test_bad_inventories' Case shape and checks (validate and render through the
CLI: exit 3, one line per problem naming file and key with a hint, nothing written).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from deploy_kit.config.models import HostConfig
from deploy_kit.config.vars_files import ansible_vars_files, directory_sources
from tests.cli import run_cli
from tests.conftest import BASE_HOSTS
from tests.unit.test_bad_inventories import (
    ALL_HOSTS,
    SECRET,
    VLLM,
    Case,
    Files,
    base_files,
    bomb,
    raw,
    run_commands,
    snapshot,
    write,
)

VF = "group_vars/vllm.yml"
FAST = {"DEPLOYKIT_INVENTORY_TIMEOUT": "2", "DEPLOYKIT_INVENTORY_MEMORY_MB": "512"}


def ini(hosts: dict[str, Any]) -> str:
    lines: list[str] = []
    for group, members in hosts["all"]["children"].items():
        lines.append(f"[{group}]")
        for name, hostvars in members["hosts"].items():
            lines.append(" ".join([name, *(f"{k}={v}" for k, v in hostvars.items())]))
        lines.append("")
    return "\n".join(lines)


def drop(path: str) -> Any:
    def mutate(files: Files, root: Path) -> None:
        del files[path]
    return mutate


def as_ini(files: Files, root: Path) -> None:
    """The same site as an INI inventory (group_vars beside it, read by Ansible)."""
    files["hosts.ini"] = ini(files.pop("hosts.yml"))


def script(name: str, body: str) -> Any:
    def mutate(files: Files, root: Path) -> None:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(body)
        path.chmod(0o755)
    return mutate


def fifo(name: str) -> Any:
    def mutate(files: Files, root: Path) -> None:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        os.mkfifo(root / name)
    return mutate


def bomb_in_hosts(doc: dict[str, Any]) -> str:
    """hosts.yml with an alias bomb as `all: vars:` (anchors need YAML text, not a dict)."""
    body = yaml.safe_dump(doc).splitlines()[1:]  # below `all:`
    return "all:\n  vars:\n" + "".join(f"    {line}\n" for line in bomb().splitlines()) + \
        "".join(f"{line}\n" for line in body)


def chain(*mutations: Any) -> Any:
    def mutate(files: Files, root: Path) -> None:
        for m in mutations:
            m(files, root)
    return mutate


EXTRA_HOST = "[vllm]\ngpu9 ansible_host=10.0.1.9 vllm_accelerator=cuda vllm_port=70000\n"
LISTING = {"vllm": {"hosts": ["gpu9"]},
           "_meta": {"hostvars": {"gpu9": {"ansible_host": "10.0.1.9",
                                           "vllm_accelerator": "cuda", "vllm_port": 70000}}}}

CASES = [
    # --- class 1: the vars files Ansible reads, not others -------------------------------
    Case("group-vars-no-extension-hides-yml", raw("group_vars/vllm", "vllm_port: 70000\n"),
         "group_vars/vllm", "vllm_port", VLLM),
    Case("group-vars-json", chain(drop(VF), raw("group_vars/vllm.json", '{"vllm_port": 70000}')),
         "group_vars/vllm.json", "vllm_port", VLLM),
    Case("group-vars-yaml-before-json", chain(
        drop(VF), raw("group_vars/vllm.yaml", "vllm_port: 70000\n"),
        raw("group_vars/vllm.json", '{"vllm_port": 8000}')),
         "group_vars/vllm.yaml", "vllm_port", VLLM),
    Case("group-vars-nested-directory", chain(
        drop(VF), raw("group_vars/vllm/a/b/deep.yml", "vllm_port: 70000\n")),
         "group_vars/vllm/a/b/deep.yml", "vllm_port", VLLM),
    Case("group-vars-file-without-extension-in-directory", chain(
        drop(VF), raw("group_vars/vllm/settings", "vllm_port: 70000\n")),
         "group_vars/vllm/settings", "vllm_port", VLLM),
    Case("host-vars-no-extension", raw("host_vars/gpu1", "vllm_port: 70000\n"),
         "host_vars/gpu1", "vllm_port", ("gpu1",)),
    Case("host-vars-directory-json", raw("host_vars/gpu1/port.json", '{"vllm_port": 70000}'),
         "host_vars/gpu1/port.json", "vllm_port", ("gpu1",)),
    # a host in no group is in Ansible's implicit `ungrouped`
    Case("ungrouped-group-vars", chain(
        lambda files, root: files["hosts.yml"]["all"].__setitem__(
            "hosts", {"lone": {"ansible_host": "10.0.9.9"}}),
        raw("group_vars/ungrouped.yml", "deploykit_s3_bucket: X\n")),
         "group_vars/ungrouped.yml", "deploykit_s3_bucket", ("lone",)),
    # --- class 1: every inventory source in a directory --------------------------------
    Case("second-ini-source", raw("extra.ini", EXTRA_HOST), "extra.ini", "vllm_port",
         ("gpu9",)),
    Case("second-yaml-source", raw("more.yaml", {"all": {"children": {"vllm": {"hosts": {
        "gpu9": {"ansible_host": "10.0.1.9", "vllm_accelerator": "cuda",
                 "vllm_port": 70000}}}}}}), "more.yaml", "vllm_port", ("gpu9",)),
    Case("second-source-sets-all-vars", raw("extra", "[all:vars]\nvllm_port=70000\n"),
         "extra", "vllm_port", VLLM),
    Case("script-source-beside-hosts", script(
        "dynamic.sh", f"#!/bin/sh\ncat <<'EOF'\n{json.dumps(LISTING)}\nEOF\n"),
         "dynamic.sh", "vllm_port", ("gpu9",)),
    Case("fifo-source-beside-hosts", fifo("extra-hosts"), "extra-hosts",
         "(inventory source)", bounded=True),
    Case("alias-bomb-in-hosts-beside-second-source", chain(
        lambda files, root: files.__setitem__("hosts.yml", bomb_in_hosts(files["hosts.yml"])),
        raw("extra.ini", "[vllm]\ngpu9 ansible_host=10.0.1.9 vllm_accelerator=cuda\n")),
         "hosts.yml", "(inventory source)", bounded=True),
    Case("nested-source-group-vars-bomb", chain(
        raw("prod/hosts.yml", {"all": {"children": {"vllm": {"hosts": {"gpu9": {
            "ansible_host": "10.0.1.9", "vllm_accelerator": "cuda"}}}}}}),
        raw("prod/group_vars/all.yml", bomb())),
         "prod/group_vars/all.yml", "(file)", bounded=True),
    # --- class 11: Ansible's inventory API, bounded -------------------------------------
    Case("ini-group-vars-alias-bomb", chain(as_ini, raw("group_vars/all.yml", bomb())),
         "group_vars/all.yml", "(file)", bounded=True),
    Case("ini-group-vars-fifo", chain(as_ini, drop("group_vars/all.yml"),
                                      fifo("group_vars/all.yml")),
         "group_vars/all.yml", "(file)", bounded=True),
    Case("ini-group-vars-huge-integer", chain(as_ini, raw(
        "group_vars/all.yml", "vllm_port: " + "9" * 5000 + "\n")),
         "group_vars/all.yml", "vllm_port", bounded=True),
    Case("ini-host-var-huge-integer", lambda files, root: files.__setitem__(
        "hosts.ini", ini(files.pop("hosts.yml")).replace(
            "vllm_accelerator=cuda", "vllm_accelerator=cuda vllm_port=" + "9" * 5000)),
         "hosts.ini", "vllm_port", ("gpu1",), bounded=True),
    Case("ini-host-vars-link-out", chain(as_ini, lambda files, root: (
        (root / "host_vars").mkdir(), (root / "host_vars" / "gpu1.yml").symlink_to(
            "/etc/passwd"))), "host_vars/gpu1.yml", "(file)", bounded=True),
    Case("script-never-returns", chain(drop("hosts.yml"), script(
        "inventory.sh", "#!/bin/sh\nsleep 600\n")), "inv", "(inventory)", env=FAST,
         bounded=True),
    Case("script-prints-without-end", chain(drop("hosts.yml"), script(
        "inventory.sh", "#!/bin/sh\nexec yes '{\"a\": 1}'\n")), "inv", "(inventory)",
         env=FAST, bounded=True),
    Case("script-fails", chain(drop("hosts.yml"), script(
        "inventory.sh", "#!/bin/sh\necho broken >&2\nexit 2\n")), "inventory.sh",
         "(inventory source)", bounded=True),
    # --- class 10: edge values reaching the YAML reader ----------------------------------
    Case("huge-integer-setting", raw(VF, "vllm_port: " + "9" * 5000 + "\n"), VF, "vllm_port"),
    Case("huge-integer-other-key", raw(VF, "my_number: " + "9" * 5000 + "\n"), VF,
         "my_number"),
    Case("huge-integer-nested", raw(VF, "lmcache_extra_config:\n  a: [1, " + "9" * 5000 +
                                    "]\n"), VF, "lmcache_extra_config.a[1]"),
    Case("impossible-date", raw(VF, "my_date: 2026-13-45\n"), VF, "my_date"),
    Case("explicit-int-tag", raw(VF, "vllm_port: !!int eighty\n"), VF, "vllm_port"),
    Case("int-beyond-64-bits", raw(VF, "lmcache_extra_config: {a: " + "9" * 40 + "}\n"), VF,
         "lmcache_extra_config", VLLM),
    Case("float-port", raw(VF, "vllm_port: 8000.0\n"), VF, "vllm_port", VLLM),
    Case("quoted-padded-port", raw(VF, "vllm_port: ' 8000 '\n"), VF, "vllm_port", VLLM),
    Case("underscore-port", raw(VF, "vllm_port: '8_000'\n"), VF, "vllm_port", VLLM),
    Case("text-false-as-bool", raw("group_vars/all.yml", "deploykit_s3_tls: 'false'\n"),
         "group_vars/all.yml", "deploykit_s3_tls", ALL_HOSTS),
    Case("number-as-bool", raw("group_vars/all.yml", "deploykit_s3_tls: 1\n"),
         "group_vars/all.yml", "deploykit_s3_tls", ALL_HOSTS),
    Case("binary-as-text", raw(VF, "vllm_model: !!binary UXdlbi9Rd2VuMy04Qg==\n"), VF,
         "vllm_model", VLLM),
    Case("timestamp-in-pass-through", raw(VF, "lmcache_extra_config: {a: 2026-01-01}\n"), VF,
         "lmcache_extra_config", VLLM),
    Case("infinity-in-pass-through", raw(VF, "lmcache_extra_config: {a: .inf}\n"), VF,
         "lmcache_extra_config", VLLM),
    Case("zero-width-space-in-value", raw(VF, 'vllm_user: "vllm\\u200b"\n'), VF, "vllm_user",
         VLLM),
    Case("right-to-left-override-in-path", raw(
        "group_vars/all.yml", 'deploykit_common_record_path: "/var/lib/\\u202enosj.x"\n'),
         "group_vars/all.yml", "deploykit_common_record_path", ALL_HOSTS),
    Case("zero-width-space-before-key", raw(VF, '"\\u200bvllm_port": 8001\n'), VF,
         "\\u200bvllm_port", VLLM),
    Case("overlong-string", raw(VF, "vllm_user: " + "v" * 40_000 + "\n"), VF, "vllm_user",
         VLLM),
]

CONTROLS = [
    # Ansible never reads these: deploykit must not refuse the site for them
    Case("control-group-vars-directory-hides-yml", lambda files, root: (
        (root / "group_vars" / "vllm").mkdir(parents=True),
        (root / "group_vars" / "vllm" / "main.yml").write_text("vllm_port: 8001\n"),
        files.__setitem__(VF, "vllm_port: 70000\n")), "", ""),
    Case("control-no-extension-hides-yml", chain(
        raw("group_vars/vllm", "vllm_port: 8001\n"), raw(VF, "vllm_port: 70000\n")), "", ""),
    Case("control-hidden-backup-and-other-extensions", chain(
        drop(VF), raw("group_vars/vllm/.old.yml", "vllm_port: 70000\n"),
        raw("group_vars/vllm/main.yml~", "vllm_port: 70000\n"),
        raw("group_vars/vllm/notes.txt", "vllm_port: 70000\n"),
        raw("group_vars/vllm/ok.yml", "vllm_port: 8001\n")), "", ""),
    Case("control-ignored-files-in-directory", chain(
        raw("README.md", "# notes\n"), raw("ansible.cfg", "[defaults]\n"),
        raw("notes.txt", "vllm_port: 70000\n"), raw(".hidden.yml", "nonsense: [")), "", ""),
    Case("control-model-config-in-directory", raw(
        "models/tiny/config.json", '{"num_hidden_layers": 4, "hidden_size": 512}'), "", ""),
    Case("control-second-source-adds-valid-host", raw(
        "extra.ini", "[vllm]\ngpu9 ansible_host=10.0.1.9 vllm_accelerator=cuda\n"), "", ""),
    Case("control-ini-inventory", as_ini, "", ""),
    Case("control-edge-values-that-are-fine", raw(VF, "\ufeffvllm_port: '8001'\n"
                                                  "lmcache_extra_config: {a: 0o17, b: 1:20}\n"
                                                  "my_binary: !!binary aGVsbG8=\n"
                                                  "my_date: 2026-01-01\n"
                                                  "my_big: " + "9" * 100 + "\n"), "", ""),
]


def run_case(case: Case, tmp_path: Path) -> tuple[list[Any], str]:
    work = tmp_path / "case"
    root = work / "inv"
    root.mkdir(parents=True)
    files = base_files()
    case.mutate(files, root)
    write(root, files, fold=False)
    before = snapshot(tmp_path)
    results = run_commands(case, root, work / "out", work)
    text = "".join(r.stdout + r.stderr for r in results)
    assert "Traceback" not in text and "internal error" not in text, text
    assert SECRET not in text
    if case.file:
        assert snapshot(tmp_path) == before  # nothing written: not OUT, not outside it
    return results, text


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_inventory(case: Case, tmp_path: Path) -> None:
    started = time.monotonic()
    results, text = run_case(case, tmp_path)
    assert [r.returncode for r in results] == [3, 3], text
    for result in results:
        lines = [ln for ln in result.stderr.splitlines() if " — " in ln]
        hits = [ln for ln in lines if f"{case.file}: {case.key}" in ln]
        assert len(hits) == 1, (case.file, case.key, lines)
        assert hits[0].split(" — ", 1)[1].strip(), hits[0]  # a hint
        for host in case.hosts:
            assert host in hits[0].split(" — ", 1)[0], (host, hits[0])
        assert len(lines) == 1, lines
    if case.env:  # the limits set: both commands well inside the corpus's time
        assert time.monotonic() - started < 25


@pytest.mark.parametrize("case", CONTROLS, ids=[c.name for c in CONTROLS])
def test_control_validates(case: Case, tmp_path: Path) -> None:
    results, text = run_case(case, tmp_path)
    assert [r.returncode for r in results] == [0, 0], text


def test_a_hung_script_is_killed_with_its_children(tmp_path: Path) -> None:
    marker = tmp_path / "pid"
    inventory = tmp_path / "inventory.sh"
    inventory.write_text(f"#!/bin/sh\necho $$ > {marker}\nexec sleep 600\n")
    inventory.chmod(0o755)
    result = run_cli("validate", "-i", str(inventory), env={"DEPLOYKIT_INVENTORY_TIMEOUT": "2"})
    assert result.returncode == 3 and "within 2 s" in result.stderr, result
    pid = int(marker.read_text())
    for _ in range(50):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"the inventory script {pid} outlived validate")


# --- Ansible's own discovery is the oracle --------------------------------------------

LAYOUTS: list[dict[str, str]] = [
    {"all": "a: 1", "all.yml": "b: 1"},
    {"all/x.yml": "a: 1", "all.yml": "b: 1", "all.json": "{}"},
    {"all.yaml": "a: 1", "all.json": "{}"},
    {"all.json": "{}"},
    {"all/b.yml": "", "all/a.yaml": "", "all/c.json": "", "all/d": "", "all/e.txt": "",
     "all/.f.yml": "", "all/g.yml~": "", "all/sub/h.yml": "", "all/sub.d/i.yml": "",
     "all/sub/deeper/j": ""},
    {"web.yml": "", "web.yaml": ""},
]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_vars_files_are_the_ones_ansible_finds(layout: dict[str, str], tmp_path: Path) -> None:
    from ansible.parsing.dataloader import DataLoader

    for rel, text in layout.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    for name in ("all", "web", "none"):
        theirs = DataLoader().find_vars_files(str(tmp_path), name)
        mine = ansible_vars_files(tmp_path, name, specials=False)
        assert [str(p) for p in mine] == [str(p) for p in theirs], name


def test_directory_sources_are_the_ones_ansible_parses(tmp_path: Path) -> None:
    from ansible.inventory.manager import IGNORED

    names = ["hosts.yml", "extra.ini", "hosts", "README.md", "notes.txt", "ansible.cfg",
             ".hidden", "group_vars", "host_vars", "vars_plugins", "old.bak", "x.retry",
             "x.orig", "x.pyc", "backup~", "x.json", "sub"]
    for name in names:
        (tmp_path / name).write_text("")
    found = {p.name for p in directory_sources(tmp_path)}
    assert found == {n for n in names if not IGNORED.search(n.encode())}
    assert found >= {"hosts.yml", "extra.ini", "hosts", "x.json"}


def test_the_source_forms_ansible_accepts_give_one_line(tmp_path: Path) -> None:
    """-i given as a link to an inventory (fine), a FIFO, a directory with no source."""
    good = tmp_path / "good"
    (good / "group_vars").mkdir(parents=True)
    (good / "hosts.yml").write_text(yaml.safe_dump(BASE_HOSTS))
    (tmp_path / "link").symlink_to(good)
    assert run_cli("validate", "-i", str(tmp_path / "link")).returncode == 0
    os.mkfifo(tmp_path / "pipe")
    empty = tmp_path / "empty"
    (empty / "group_vars").mkdir(parents=True)
    (empty / "README.md").write_text("no inventory here\n")
    for source, text in ((tmp_path / "pipe", "FIFO"), (empty, "hosts.yml: missing")):
        result = run_cli("validate", "-i", str(source))
        assert result.returncode == 3 and text in result.stderr, result
        assert len([ln for ln in result.stderr.splitlines() if " — " in ln]) == 1, result
    if os.geteuid() != 0:  # root reads any file: the permission case needs a user
        locked = tmp_path / "locked.ini"
        locked.write_text("[vllm]\ngpu1\n")
        locked.chmod(0)
        result = run_cli("validate", "-i", str(locked))
        assert result.returncode == 3 and "permission denied" in result.stderr, result


# --- class 10: every setting against edge values -------------------------------------

EDGE_YAML = [
    "9" * 30, "-" + "9" * 30, "1e400", ".inf", "-.inf", ".nan", "yes", "off", "'on'",
    "0o17", "017", "1:20", "2026-01-01", "2026-01-01 10:00:00", "!!binary aGVsbG8=", "~",
    "''", '"\\0"', '"\\ufeffx"', '"x\\u200b"', '"\\u202eabc"', "x" * 20_000, "[" * 40 + "]" * 40,
    "{}", "[]", "'8000'", "8000.0", "' 8000 '", "true", "-1", "0", "[1, .nan]",
    "{a: " + "9" * 30 + "}", "[!!binary aGVsbG8=]",
]


def test_every_setting_takes_edge_values_without_a_crash(tmp_path: Path) -> None:
    """Each setting alone with each edge value (in-process, the pipeline open_site runs,
    and render for what validates): an InventoryError or a site, never anything else."""
    from deploy_kit.config.fit import with_server_l1
    from deploy_kit.config.load import load_inventory
    from deploy_kit.config.rules import validate_site
    from deploy_kit.config.site import build_site
    from deploy_kit.config.vault import VaultSecrets
    from deploy_kit.ops.site import SITE_RULES
    from deploy_kit.render.files import render_site
    from deploy_kit.safe_read import load_yaml

    root = tmp_path / "inv"
    (root / "group_vars").mkdir(parents=True)
    (root / "hosts.yml").write_text(yaml.safe_dump(BASE_HOSTS))
    base = load_inventory(root, VaultSecrets(), collect=True)
    values = [load_yaml(f"v: {text}\n")[0]["v"] for text in EDGE_YAML]
    crashes: list[str] = []
    accepted = 0
    for key in HostConfig.model_fields:
        for text, value in zip(EDGE_YAML, values, strict=True):
            for host in base.hosts.values():
                host.vars[key] = value
                host.sources[key] = str(root / "group_vars" / "all.yml")
            try:
                site, problems = build_site(base)
                site = with_server_l1(site)
                problems += validate_site(site, SITE_RULES)
                if not problems:
                    accepted += 1
                    render_site(site)
            except Exception as exc:
                crashes.append(f"{key}: {text[:30]!r}: {type(exc).__name__}: {exc}"[:200])
        for host in base.hosts.values():
            del host.vars[key], host.sources[key]
    assert not crashes, "\n".join(crashes[:40])
    assert accepted > 0  # the loop validated something: an always-failing pipeline fails


def test_all_settings_at_once_through_the_cli(tmp_path: Path) -> None:
    """Every setting set to one edge value in group_vars/all.yml, through render (which
    validates first) in a subprocess: exit 0 or 3, no traceback."""
    root = tmp_path / "inv"
    (root / "group_vars").mkdir(parents=True)
    (root / "hosts.yml").write_text(yaml.safe_dump(BASE_HOSTS))
    for text in ("9" * 5000, "yes", "'8000'", ".nan", "2026-01-01", "!!binary aGVsbG8=",
                 '"x\\u200b"', "x" * 20_000):
        (root / "group_vars" / "all.yml").write_text(
            "".join(f"{key}: {text}\n" for key in HostConfig.model_fields))
        for argv in (["render", "-i", str(root), "-o", str(tmp_path / "out")],):
            proc = subprocess.run([sys.executable, "-m", "deploy_kit", *argv],
                                  capture_output=True, text=True, timeout=120,
                                  env={**os.environ, "COLUMNS": "400"})
            assert proc.returncode in (0, 3), (text[:30], proc.stderr[-2000:])
            assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr


# --- M1 and L5: -e cannot override deploykit's run variables ------------------------

@pytest.mark.parametrize("extra", [
    "deploykit_destroy_data=true", '{"deploykit_destroy_data": true}',
    "{deploykit_destroy_data: yes}", "@vars.yml", "deploykit_render_dir=/tmp/elsewhere"])
def test_run_variables_are_refused_in_extra_vars(extra: str, tmp_path: Path,
                                                 make_inventory: Any) -> None:
    root = make_inventory()
    (tmp_path / "vars.yml").write_text("deploykit_destroy_data: true\n")
    argv = ["down", "--yes"] if "destroy" in extra or extra.startswith("@") else ["up"]
    result = run_cli(*argv, "-i", str(root), "--print-command", "-e", extra, cwd=tmp_path)
    assert result.returncode == 3, result
    lines = [ln for ln in result.stderr.splitlines() if " — " in ln]
    assert len(lines) == 1 and ("deploykit_destroy_data" in lines[0] or
                                "deploykit_render_dir" in lines[0]), result.stderr
    assert "--yes-i-really-mean-it" in lines[0] or "render -o" in lines[0]
    assert "ansible-playbook" not in result.stdout


def test_down_refuses_the_run_variable_before_asking(make_inventory: Any) -> None:
    # no --yes: the refusal comes first, not a prompt that then fails
    result = run_cli("down", "-i", str(make_inventory()), "-e", "deploykit_destroy_data=1")
    assert result.returncode == 3 and "deploykit_destroy_data" in result.stderr, result


@pytest.mark.parametrize("extra", ["{" + '"a": [' * 3000 + "]" * 3000 + "}",
                                   "{a: &a [x, x, x, x, x, x, x, x, x], " + ", ".join(
                                       f"b{i}: &b{i} [" + ", ".join(
                                           [f"*{'a' if i == 0 else f'b{i - 1}'}"] * 9) + "]"
                                       for i in range(8)) + "}"])
def test_inline_extra_vars_are_read_bounded(extra: str, make_inventory: Any) -> None:
    result = run_cli("up", "-i", str(make_inventory()), "--print-command", "-e", extra)
    assert result.returncode == 3, result.stderr[-500:]
    assert "Traceback" not in result.stderr and "--extra-vars" in result.stderr


def test_settings_still_validate_as_plain_values(tmp_path: Path) -> None:
    """The guard against lax typing keeps what YAML writes plainly: numbers, quoted
    canonical numbers, true/false, YAML 1.1's yes/no."""
    config = HostConfig.model_validate({"vllm_port": "8001", "deploykit_s3_tls": True,
                                        "deploykit_storage_gbps": "12.5",
                                        "lmcache_extra_config": {"a": 2**40}})
    assert config.vllm_port == 8001 and config.deploykit_storage_gbps == 12.5
