"""Path settings, judged by what the roles do with each path (H1 of the 2026-12-06 review).

The roles run as root on every host: they create, chown, chmod and (on `down`) delete the
directories below, replace the converge record, and copy controller files and directories
to the fleet. So each path setting may name only what can be deploykit's own:

- host directories the roles own (PRIVATE_DIRS): never `/`, a system or shared directory,
  anything above one, anything inside a system tree (/proc, /etc/ssh, ...), and inside a
  package tree (/etc, /opt, /var/lib, ...) only a directory named for deploykit or its
  service (/etc/deploykit, /opt/consul, /var/lib/vllm/...); and no two of them nested where
  one is deleted or re-owned (consul_data_dir above the venv would delete it);
- the converge record (replaced and deleted): a path with a component named `deploykit`;
- controller binaries (`*_binary_src`): an existing, executable regular file named for its
  tool, outside the controller's system trees (symlinks are followed and judged by target);
- controller directories shipped to the hosts (wheel directories): not `/`, a system
  directory, the home directory, the inventory or anything above them.
"""

from __future__ import annotations

import functools
import os
import posixpath
import stat
from collections.abc import Iterator
from pathlib import Path

from deploy_kit.config import names
from deploy_kit.config.models import HostConfig
from deploy_kit.config.rulebook import collector
from deploy_kit.config.rulebook import src as _src
from deploy_kit.config.site import Host, Site
from deploy_kit.core.errors import Problem

RULES, rule = collector()

# Directories the OS, packages or every user share; a private directory may be none of
# them nor above one (their ancestors are added below).
SHARED_DIRS = frozenset({
    "/", "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/libx32",
    "/lost+found", "/media", "/mnt", "/opt", "/proc", "/root", "/run", "/sbin", "/snap",
    "/srv", "/sys", "/tmp", "/usr", "/var",
    "/usr/bin", "/usr/sbin", "/usr/lib", "/usr/lib32", "/usr/lib64", "/usr/libexec",
    "/usr/include", "/usr/share", "/usr/src", "/usr/local", "/usr/local/bin",
    "/usr/local/sbin", "/usr/local/lib", "/usr/local/libexec", "/usr/local/share",
    "/usr/local/etc", "/usr/local/include", "/usr/local/src",
    "/var/lib", "/var/log", "/var/tmp", "/var/cache", "/var/spool", "/var/run", "/var/lock",
    "/var/mail", "/var/opt", "/var/local", "/var/backups", "/var/www", "/var/crash",
    "/run/lock", "/run/user", "/run/systemd", "/dev/shm",
    "/etc/systemd", "/etc/systemd/system", "/etc/ssl", "/etc/ssl/certs", "/etc/pki",
    "/etc/default", "/etc/sysconfig", "/etc/profile.d", "/etc/apt", "/etc/yum.repos.d",
    "/var/lib/dpkg", "/var/lib/apt", "/var/lib/rpm", "/var/lib/systemd", "/var/lib/docker",
    "/var/lib/containers", "/var/lib/ceph", "/var/log/journal",
})
# Trees nothing of deploykit's may be inside, whatever its name: virtual and world-writable
# file systems, the OS's binaries, credentials, and directories deploykit's roles (or the
# services next to them) already own with another meaning.
SYSTEM_TREES = (
    "/proc", "/sys", "/dev", "/boot", "/bin", "/sbin", "/lib",
    "/lib32", "/lib64", "/libx32", "/usr/bin", "/usr/sbin", "/usr/local/bin",
    "/usr/local/sbin", "/usr/lib", "/usr/lib64", "/usr/include", "/lost+found", "/run/user",
    "/etc/ssh", "/etc/ssl", "/etc/pki", "/etc/sudoers.d", "/etc/pam.d", "/etc/security",
    "/etc/systemd", "/etc/cron.d", "/etc/apt", "/etc/default", "/etc/sysconfig",
    "/etc/ceph", "/etc/consul.d", "/etc/coredns", "/etc/haproxy", "/etc/prometheus",
    "/var/lib/ceph", "/var/lib/dpkg", "/var/lib/rpm", "/var/lib/apt", "/var/lib/systemd",
    "/var/log",
)
# Trees where packages and services each own a directory: inside one, a private directory
# must sit in a directory named for deploykit or its service (/opt/vllm, /var/lib/consul).
PACKAGE_TREES = ("/etc", "/opt", "/usr", "/usr/local", "/usr/local/lib", "/usr/local/share",
                 "/usr/share", "/usr/libexec", "/usr/local/libexec", "/var", "/var/lib",
                 "/var/cache", "/var/spool", "/var/opt", "/var/local", "/run", "/var/run",
                 "/home", "/root")
# world-writable: anyone may plant a link there first; the converge record (a fixed name
# the roles replace as root) may not sit there. (Directories below them stay allowed: the
# benches and one-machine proofs use private mkdtemp directories there.)
WORLD_WRITABLE = ("/tmp", "/var/tmp", "/dev/shm")
OWNER_WORDS = ("deploykit", "consul", "coredns", "lmcache", "vllm", "kvcache", "kv-cache",
               "kv_cache")
SECRET_COMPONENTS = (".ssh", ".gnupg", ".aws", ".kube", ".docker", ".vault-token")

# The host directories the roles use, with what they do there (the messages name it) and,
# for those they create, re-own or delete, the words (besides OWNER_WORDS) a directory in
# a package tree may be named by (None: written into only, so any non-system directory,
# e.g. an existing conda environment as the venv).
PRIVATE_DIRS: dict[str, tuple[str, tuple[str, ...] | None]] = {
    "consul_data_dir": ("made consul:consul 0750 and deleted by `down`", ()),
    "lmcache_config_dir": ("made root:root 0755 and filled with LMCache's files", ()),
    "vllm_models_dir": ("filled with the staged model", ("model", "llm", "huggingface",
                                                          "weights")),
    "vllm_venv": ("made a Python virtual environment", None),
    "router_venv": ("made a Python virtual environment", None),
    "lmcache_disk_path": ("filled with LMCache's chunk files", None),
    "vllm_wheel_staging_dir": ("filled with the wheelhouse and deleted after every venv "
                               "build", ()),
}
# of those, the ones whose whole tree the roles delete or re-own: nothing else may be in it
DESTRUCTIVE_DIRS = ("consul_data_dir", "vllm_wheel_staging_dir")
RECORD_KEY = "deploykit_common_record_path"
BINARY_SOURCES = {"consul_binary_src": "consul", "coredns_binary_src": "coredns"}
BINARY_GROUPS = {"consul_binary_src": names.CONSUL_AGENT_GROUPS,
                 "coredns_binary_src": frozenset({"dns"})}
CONTROLLER_DIRS = ("vllm_wheel_dir", "lmcache_wheel_dir", "router_wheel_dir")


def normal(path: str) -> str:
    """The path as the kernel resolves its name: `//etc`, `/etc/./x`, `/etc/../etc` and
    trailing slashes folded (POSIX normpath keeps a leading `//`)."""
    folded = posixpath.normpath("/" + path.lstrip("/")) if path.startswith("/") else path
    return folded


def _inside(path: str, tree: str) -> bool:
    return path == tree or path.startswith(tree.rstrip("/") + "/")


@functools.cache
def _shared_and_above() -> frozenset[str]:
    """SHARED_DIRS and every ancestor of them and of SYSTEM_TREES."""
    found = set(SHARED_DIRS)
    for path in SHARED_DIRS | set(SYSTEM_TREES):
        while path != "/":
            path = posixpath.dirname(path)
            found.add(path)
    return frozenset(found)


def _named_for(component: str, words: tuple[str, ...]) -> bool:  # e.g. /opt/vllm
    lowered = component.lower()
    return any(w in lowered for w in OWNER_WORDS + words)


@functools.cache
def system_path_problem(value: str, words: tuple[str, ...] | None = ()) -> str | None:
    """Why `value` (a host path, absolute) cannot be a directory deploykit owns, or None;
    `words` None: one it only writes into (no package-tree or world-writable rule)."""
    path = normal(value)
    if path in _shared_and_above():
        return f"{value} is a system or shared directory"
    for tree in SYSTEM_TREES:
        if _inside(path, tree):
            return f"{value} is inside {tree}, which belongs to the system"
    parts = path.split("/")
    if any(p in SECRET_COMPONENTS for p in parts):
        return f"{value} is inside a credentials directory"
    if words is None:
        return None
    roots = [t for t in PACKAGE_TREES if _inside(path, t) and path != t]
    if roots:
        root = max(roots, key=len)
        first = path[len(root):].strip("/").split("/")[0]
        if not any(_named_for(p, words) for p in path[len(root):].strip("/").split("/")):
            return (f"{value} is inside {root}, where {root}/{first} belongs to another "
                    "package or service")
    return None


def _host_dirs(host: Host) -> dict[str, str]:
    """The private directories this host's roles use, normalised."""
    c = host.config
    dirs: dict[str, str] = {}
    if c.deploykit_dns_mode == "consul" and host.groups & names.CONSUL_AGENT_GROUPS:
        dirs["consul_data_dir"] = c.consul_data_dir
    if "vllm" in host.groups:
        dirs["lmcache_config_dir"] = c.lmcache_config_dir
        dirs["vllm_venv"] = c.vllm_venv
        dirs["vllm_wheel_staging_dir"] = c.vllm_wheel_staging_dir
        if c.model_is_local:
            dirs["vllm_models_dir"] = c.vllm_models_dir
        if c.lmcache_mode == "disk":
            dirs["lmcache_disk_path"] = c.lmcache_disk_path
    if "router" in host.groups:
        dirs["router_venv"] = c.router_venv
        # the router role stages its wheels there too (router_wheel_dir)
        dirs["vllm_wheel_staging_dir"] = c.vllm_wheel_staging_dir
    return {k: normal(v) for k, v in dirs.items() if v}


@rule
def host_paths_private(site: Site) -> Iterator[Problem]:
    """Directories the roles create, chown or delete as root must be deploykit's own, and
    the converge record (replaced, deleted by `down`) a deploykit file."""
    for host in site.hosts.values():
        dirs = _host_dirs(host)
        for key, path in dirs.items():
            action, words = PRIVATE_DIRS[key]
            why = system_path_problem(path, words)
            if why:
                yield Problem(_src(site, host, key), key, f"{why}; it is {action} on every "
                              "host", f"name a directory of its own, e.g. "
                              f"{HostConfig.model_fields[key].default}", hosts=(host.name,))
        yield from _nested(site, host, dirs)
        record = normal(host.config.deploykit_common_record_path)
        why = record_path_problem(record)
        if why:
            yield Problem(_src(site, host, RECORD_KEY), RECORD_KEY,
                          f"{why}; the converge record is replaced (0600) and deleted by "
                          "`down` on every host",
                          "use a file in a directory named deploykit, e.g. "
                          "/var/lib/deploykit/converged.json", hosts=(host.name,))


def _nested(site: Site, host: Host, dirs: dict[str, str]) -> Iterator[Problem]:
    """Two settings naming one directory, or a deleted/re-owned one holding another's (the
    converge record may sit anywhere: `down` deletes it too). Reported once per pair, on
    the setting the inventory sets (the other may be a default)."""
    items = sorted(dirs.items())
    for i, (key, path) in enumerate(items):
        for other, other_path in items[i + 1:]:
            if path == other_path:
                why = f"{path} is also {other if key in host.sources else key}"
            elif key in DESTRUCTIVE_DIRS and _inside(other_path, path):
                why = f"{path} ({key}) holds {other} {other_path}"
            elif other in DESTRUCTIVE_DIRS and _inside(path, other_path):
                why = f"{other_path} ({other}) holds {key} {path}"
            else:
                continue
            named = other if other in host.sources or key not in host.sources else key
            if path == other_path:
                why = f"{dirs[named]} is also {key if named == other else other}"
            deleted = [k for k in (key, other) if k in DESTRUCTIVE_DIRS]
            action = f"; {deleted[0]} is {PRIVATE_DIRS[deleted[0]][0]}" if deleted else ""
            yield Problem(_src(site, host, named), named, why + action,
                          "give each setting a directory of its own, neither inside the "
                          "other", hosts=(host.name,))


@functools.cache
def record_path_problem(path: str) -> str | None:
    if path in _shared_and_above():
        return f"{path} is a system or shared directory"
    for tree in SYSTEM_TREES + WORLD_WRITABLE:
        if _inside(path, tree):
            return f"{path} is inside {tree}, which belongs to the system"
    if any(p in SECRET_COMPONENTS for p in path.split("/")):
        return f"{path} is inside a credentials directory"
    if not any("deploykit" in p.lower() for p in path.split("/")):
        return f"{path} is no deploykit file (no part of it is named deploykit)"
    return None


# --- controller paths ---------------------------------------------------------------------

def _controller(site: Site, value: str) -> Path:
    path = Path(value).expanduser()
    return path if path.is_absolute() else site.root / path


# controller trees whose content must never be shipped to hosts (the wheel directories)
CONTROLLER_SYSTEM_TREES = ("/proc", "/sys", "/dev", "/boot", "/etc", "/bin", "/sbin", "/lib",
                           "/lib64", "/usr/bin", "/usr/sbin", "/usr/lib", "/usr/libexec",
                           "/var/lib", "/var/log", "/run")


def controller_dir_problem(site: Site, given: Path,
                           trees: tuple[str, ...] = CONTROLLER_SYSTEM_TREES) -> str | None:
    """Why a controller directory deploykit writes to or ships to hosts may not be
    `given` (resolved through symlinks), or None: never `/`, a system directory or one
    above it, a system tree, a credentials directory, the home directory or the inventory,
    nor anything above them. (The CA's directory adds its own conditions: rules_tls.py.)"""
    target = given.resolve()
    text = str(target)
    inventory = site.root.resolve()
    if target == inventory or target in inventory.parents:
        return f"{target} holds the inventory itself"
    if text in _shared_and_above() or len(target.parts) < 3:
        return f"{target} is a system directory"
    for tree in trees:
        if _inside(text, tree):
            return f"{target} is inside {tree}, which belongs to the system"
    if any(p in SECRET_COMPONENTS for p in target.parts):
        return f"{target} is inside a credentials directory"
    home = Path.home().resolve()
    if target == home or target in home.parents:
        return f"{target} holds the home directory {home}"
    return None


@rule
def controller_dirs_private(site: Site) -> Iterator[Problem]:
    """Wheel directories are copied to every serving and router host: never a system
    directory, the home directory or the inventory (vault files, the CA key)."""
    seen: dict[str, str | None] = {}
    for host in {h.name: h for h in [*site.group("vllm"), *site.group("router")]}.values():
        for key in CONTROLLER_DIRS:
            value = getattr(host.config, key)
            if not value:
                continue
            if value not in seen:
                seen[value] = controller_dir_problem(site, _controller(site, value))
            why = seen[value]
            if why:
                yield Problem(_src(site, host, key), key,
                              f"{why}; its whole content is copied to every host that "
                              "installs from it",
                              "name the directory that holds only the wheels",
                              hosts=(host.name,))


def binary_problem(site: Site, value: str, tool: str) -> str | None:
    """Why `value` cannot be the controller's `tool` binary the roles copy to the hosts as
    root's /usr/local/bin/<tool>, or None."""
    given = _controller(site, value)
    try:
        st = given.stat()  # follows symlinks: the target is what is copied
    except OSError as exc:
        return f"{given} cannot be read ({exc.strerror or 'no such file'})"
    target = given.resolve()
    if not stat.S_ISREG(st.st_mode):
        return f"{given} is not a regular file"
    text = str(target)
    for tree in ("/etc", "/proc", "/sys", "/dev", "/boot", "/run", "/var/lib", "/var/log",
                 "/root/.ssh"):
        if _inside(text, tree):
            return f"{given} is the system file {target}"
    if any(p in SECRET_COMPONENTS for p in target.parts):
        return f"{given} is inside a credentials directory"
    if tool not in target.name.lower():  # a link named consul to /bin/sh is /bin/sh
        return f"{given} is {target}, not a {tool} binary (its name does not say {tool})"
    if not st.st_mode & 0o111 or not os.access(target, os.R_OK):
        return f"{given} is not an executable file readable here"
    return None


@rule
def binary_sources_valid(site: Site) -> Iterator[Problem]:
    """`*_binary_src` names a controller file every host installs as the service binary."""
    seen: dict[tuple[str, str], str | None] = {}
    for host in site.hosts.values():
        for key, tool in BINARY_SOURCES.items():
            value = getattr(host.config, key)
            if value is None or not host.groups & BINARY_GROUPS[key]:
                continue
            if (value, tool) not in seen:
                seen[(value, tool)] = "is empty" if not value else \
                    binary_problem(site, value, tool)
            why = seen[(value, tool)]
            if why:
                yield Problem(_src(site, host, key), key, why,
                              f"give the path of the {tool} binary on the controller, or "
                              "unset it to download the pinned release", hosts=(host.name,))
