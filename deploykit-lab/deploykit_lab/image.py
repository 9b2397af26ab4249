"""The host image: one debootstrapped rootfs plus an offline apt repository, cached."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from deploykit_lab.layout import (
    CACHE_DIR,
    IMAGE_PACKAGES,
    REPO_PACKAGES,
    SUDO_UID,
    SUDO_USER,
    SUITE,
    repo_path,
    rootfs_path,
)
from deploykit_lab.system import cache_lock, log, quiet, run

DEFAULT_MIRROR = "http://deb.debian.org/debian"
TIMERS = ("apt-daily.timer", "apt-daily-upgrade.timer", "dpkg-db-backup.timer",
          "e2scrub_all.timer", "fstrim.timer")


def mirror() -> str:
    """The machine's own Debian mirror (so the lab goes where apt already goes)."""
    sources = Path("/etc/apt/sources.list.d/debian.sources")
    if sources.exists():
        m = re.search(r"^URIs:\s*(\S+)", sources.read_text(), re.MULTILINE)
        if m:
            return m.group(1)
    return DEFAULT_MIRROR


def ensure_image() -> tuple[Path, Path, bool]:
    with cache_lock("image"):
        return _ensure_image()


def _ensure_image() -> tuple[Path, Path, bool]:
    """Return (rootfs, repo, built_now). Built once per recipe; later lab ups reuse it."""
    rootfs, repo = rootfs_path(), repo_path()
    if (rootfs / ".deploykit-ready").exists() and (repo / "Packages").exists():
        return rootfs, repo, False
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    work = rootfs.with_name(rootfs.name + ".tmp")
    shutil.rmtree(work, ignore_errors=True)
    run(["debootstrap", "--variant=minbase", f"--include={','.join(IMAGE_PACKAGES)}", SUITE,
         str(work), mirror()], timeout=1800)
    _build_repo(work, repo)
    _finish_image(work)
    shutil.rmtree(rootfs, ignore_errors=True)
    work.rename(rootfs)
    (rootfs / ".deploykit-ready").write_text("ok\n")
    return rootfs, repo, True


def _build_repo(rootfs: Path, repo: Path) -> None:
    """Download the closure the roles will install, exactly what the image lacks."""
    proc = rootfs / "proc"
    run(["mount", "-t", "proc", "proc", str(proc)])
    try:
        run(["chroot", str(rootfs), "apt-get", "update", "-q"], timeout=900)
        run(["chroot", str(rootfs), "apt-get", "install", "-y", "-q", "--download-only",
             "--no-install-recommends", *REPO_PACKAGES],
            env={"DEBIAN_FRONTEND": "noninteractive"}, timeout=1800)
    finally:
        quiet(["umount", str(proc)])
    shutil.rmtree(repo, ignore_errors=True)
    repo.mkdir(parents=True)
    archives = rootfs / "var" / "cache" / "apt" / "archives"
    debs = sorted(archives.glob("*.deb"))
    for deb in debs:
        shutil.move(str(deb), repo / deb.name)
    result = run(["sh", "-c", f"cd {repo} && dpkg-scanpackages -m . 2>/dev/null"])
    (repo / "Packages").write_text(result.stdout)
    log(f"offline repo: {len(debs)} packages in {repo}")


def _finish_image(rootfs: Path) -> None:
    """Offline apt source, no timers that go online, a machine-id made at first boot."""
    (rootfs / "etc" / "apt" / "sources.list").write_text("deb [trusted=yes] file:/repo ./\n")
    for f in (rootfs / "etc" / "apt" / "sources.list.d").glob("*"):
        f.unlink()
    shutil.rmtree(rootfs / "var" / "lib" / "apt" / "lists", ignore_errors=True)
    (rootfs / "var" / "lib" / "apt" / "lists" / "partial").mkdir(parents=True)
    # An old mtime: Ansible's apt cache_valid_time must see the empty lists as stale.
    os.utime(rootfs / "var" / "lib" / "apt" / "lists", (0, 0))
    (rootfs / "etc" / "machine-id").write_text("")
    for timer in TIMERS:
        (rootfs / "etc" / "systemd" / "system" / "timers.target.wants" / timer).unlink(
            missing_ok=True)
    run(["chroot", str(rootfs), "useradd", "--create-home", "--uid", str(SUDO_UID),
         "--shell", "/bin/bash", SUDO_USER])
    sudoers = rootfs / "etc" / "sudoers.d" / SUDO_USER
    sudoers.write_text(f"{SUDO_USER} ALL=(ALL:ALL) NOPASSWD: ALL\n")
    sudoers.chmod(0o440)
    run(["chroot", str(rootfs), "visudo", "-c", "-f", f"/etc/sudoers.d/{SUDO_USER}"])
    (rootfs / "etc" / "resolv.conf").unlink(missing_ok=True)
    (rootfs / "etc" / "resolv.conf").write_text("# lab host: set by the resolver role\n")
