"""The shared internal role's entry points, run through ansible-playbook on localhost as the
roles run them: the binary install (controller binary or checked release, replaced when
the version or content changes, the pin enforced) and the one-task health gate."""

from __future__ import annotations

import hashlib
import http.server
import io
import os
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path

import yaml

from tests.conftest import REPO


def play(tmp: Path, binary: dict) -> tuple[bool, str, bool]:
    """(succeeded, output, the restart handler ran) of one binary.yml run."""
    marker = tmp / "notified"
    marker.unlink(missing_ok=True)
    playbook = tmp / "play.yml"
    playbook.write_text(yaml.safe_dump([{
        "hosts": "localhost", "gather_facts": False,
        "tasks": [{"ansible.builtin.import_role": {"name": "deploykit.kvcache.deploykit_common",
                                                    "tasks_from": "binary.yml"},
                   "vars": {"deploykit_common_binary": binary}}],
        "handlers": [{"name": "Restart the service", "listen": "deploykit_common binary installed",
                      "ansible.builtin.file": {"path": str(marker), "state": "touch",
                                               "mode": "0644"}}]}]))
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
           "ANSIBLE_LOCALHOST_WARNING": "false"}
    done = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), str(playbook),
                           "-e", f"ansible_python_interpreter={sys.executable}"],
                          capture_output=True, text=True, timeout=300, cwd=REPO, env=env)
    return done.returncode == 0, done.stdout + done.stderr, marker.exists()


def release(tmp: Path, version: str, content: bytes) -> tuple[str, str]:
    """A tool-<version>.tgz holding one `tool` binary: (file URL, its sha256)."""
    archive = tmp / f"tool_{version}_linux_amd64.tgz"
    with tarfile.open(archive, "w:gz") as tar:
        info = tarfile.TarInfo("tool")
        info.size, info.mode = len(content), 0o755
        tar.addfile(info, io.BytesIO(content))
    return archive.as_uri(), hashlib.sha256(archive.read_bytes()).hexdigest()


def test_a_controller_binary_is_installed_replaced_and_held_to_its_pin(tmp_path: Path) -> None:
    src = tmp_path / "tool-src"
    src.write_bytes(b"#!/bin/sh\necho v1\n")
    base = {"name": "tool", "version": "1", "src": str(src), "url": "https://unused.invalid/x.tgz",
            "archive_checksum": "sha256:0", "bin_dir": str(tmp_path / "bin"),
            "lib_dir": str(tmp_path / "lib")}
    (tmp_path / "bin").mkdir()
    installed = tmp_path / "bin" / "tool"
    ok, out, notified = play(tmp_path, base)
    assert ok and notified, out
    assert installed.read_bytes() == src.read_bytes() and installed.stat().st_mode & 0o777 == 0o755
    ok, out, notified = play(tmp_path, base)
    assert ok and not notified, out  # unchanged: nothing to restart
    src.write_bytes(b"#!/bin/sh\necho v2\n")
    ok, out, notified = play(tmp_path, {**base, "version": "2"})
    assert ok and notified and installed.read_bytes().endswith(b"v2\n"), out
    ok, out, _ = play(tmp_path, {**base, "sha256": "0" * 64})
    assert not ok and "not the tool binary pinned by its sha256" in out, out[-2000:]


def test_a_release_is_checked_unpacked_per_version_and_replaces_the_old(tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    (tmp_path / "lib").mkdir()
    dirs = {"bin_dir": str(tmp_path / "bin"), "lib_dir": str(tmp_path / "lib")}
    url, digest = release(tmp_path, "1.0", b"#!/bin/sh\necho 1.0\n")
    ok, out, notified = play(tmp_path, {"name": "tool", "version": "1.0", "url": url,
                                        "archive_checksum": f"sha256:{digest}", **dirs})
    assert ok and notified, out
    assert (tmp_path / "bin" / "tool").read_bytes().endswith(b"1.0\n")
    assert (tmp_path / "lib" / "tool-1.0" / "tool").exists()
    url2, digest2 = release(tmp_path, "1.1", b"#!/bin/sh\necho 1.1\n")
    new = {"name": "tool", "version": "1.1", "url": url2, "archive_checksum": f"sha256:{digest2}",
           **dirs}
    ok, out, notified = play(tmp_path, new)
    assert ok and notified, out  # a new version replaces the installed binary
    assert (tmp_path / "bin" / "tool").read_bytes().endswith(b"1.1\n")
    ok, out, notified = play(tmp_path, new)
    assert ok and not notified, out
    ok, out, _ = play(tmp_path, {**new, "version": "1.2", "archive_checksum": "sha256:" + "1" * 64})
    assert not ok and "checksum" in out.lower(), out[-2000:]  # never installed unchecked
    assert (tmp_path / "bin" / "tool").read_bytes().endswith(b"1.1\n")


class _Late(http.server.BaseHTTPRequestHandler):
    ready_at = 0.0

    def do_GET(self) -> None:
        code = 200 if self.path == "/up" or time.monotonic() >= self.ready_at else 503
        self.send_response(code)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def test_the_health_gate_waits_for_every_endpoint_and_names_the_one_that_never_answers(
        ) -> None:
    from tests.tools import ansible_module

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Late)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        _Late.ready_at = time.monotonic() + 2
        done = ansible_module("deploykit_http_wait", {"urls": [f"{base}/up", f"{base}/late"],
                                                      "timeout": 30})
        assert done["changed"] is False and done["waited"] >= 1, done
        assert done["status"] == {f"{base}/up": "200", f"{base}/late": "200"}
        _Late.ready_at = time.monotonic() + 3600
        failed = ansible_module("deploykit_http_wait", {"urls": [f"{base}/up", f"{base}/late"],
                                                        "timeout": 2}, ok=False)
        assert f"{base}/late (503)" in failed["msg"] and f"{base}/up" not in failed["msg"]
    finally:
        server.shutdown()
