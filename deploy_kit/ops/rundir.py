"""The tree the playbooks read: rendered once per run, copied by the roles.

Layout (the same as `deploykit render -o DIR`):
  DIR/<host>/<absolute path>            every non-secret file the host receives
  DIR/<host>/.deploykit/settings.json   the host's validated settings + computed `_` names
  DIR/_cluster/...                      site-wide files (pool script, lifecycle, cephadm spec)
  DIR/_cluster/.deploykit/site.json     site-wide facts the roles branch on

Secret files are left out: the roles write them from keys Ansible holds (RGW or vault), so a
run directory never contains a key.
"""

from __future__ import annotations

import hashlib
import json
from functools import cache
from pathlib import Path, PurePosixPath
from typing import Any

from deploy_kit import agents
from deploy_kit.config import names
from deploy_kit.config.models import SECRET_KEYS as MODEL_SECRET_KEYS
from deploy_kit.config.models import HostConfig
from deploy_kit.config.site import Host, Site
from deploy_kit.core import compat, router_lock
from deploy_kit.ops import converged
from deploy_kit.ops.inputs import INPUTS_PATH, code_inputs
from deploy_kit.ops.wheelhouse import has_archive, lock_digest
from deploy_kit.plan import watch
from deploy_kit.plan.serving import serving_host
from deploy_kit.project import project_dir
from deploy_kit.render import consul_tls, s3_access, self_heal, tls
from deploy_kit.render.files import CLUSTER, RenderedFile, Tree, render_site, write_tree
from deploy_kit.render.storage import (
    deploykit_manages_concentrator,
    lifecycle_rules,
)

SETTINGS_PATH = "/.deploykit/settings.json"
SITE_PATH = "/.deploykit/site.json"
SECRET_KEYS = frozenset({"deploykit_s3_access_key", "deploykit_s3_secret_key",
                         *MODEL_SECRET_KEYS})


def consul_archive_checksum(c: HostConfig) -> str:
    """A pin (the inventory's, else compat.yaml's), else the release's SHA256SUMS file
    beside the archive (a mirror of the release directory carries it too)."""
    pin = c.consul_archive_sha256 or compat.consul_release_sha256(c.consul_version)
    if pin:
        return f"sha256:{pin}"
    url = c.consul_binary_url.replace("{version}", c.consul_version)
    return f"sha256:{url.rsplit('/', 1)[0]}/consul_{c.consul_version}_SHA256SUMS"


def coredns_archive_checksum(c: HostConfig) -> str:
    """coredns_archive_sha256 (or the older coredns_binary_checksum, when no controller
    binary is given) when set, else the `<archive>.sha256` CoreDNS publishes with every
    release archive."""
    legacy = "" if c.coredns_binary_src else c.coredns_binary_checksum.removeprefix("sha256:")
    pin = c.coredns_archive_sha256 or legacy
    if pin:
        return f"sha256:{pin}"
    return f"sha256:{c.coredns_binary_url.replace('{version}', c.coredns_version)}.sha256"


def coredns_binary_sha256(c: HostConfig) -> str:
    """The installed coredns binary's pin: coredns_binary_sha256, else the older
    coredns_binary_checksum when it names a controller binary; "" for none."""
    legacy = c.coredns_binary_checksum.removeprefix("sha256:") if c.coredns_binary_src else ""
    return c.coredns_binary_sha256 or legacy


# settings.json's own key: deploykit_common/tasks/settings.yml loads the file once per host per
# run (include_vars persists for the rest of the playbook run) and skips when it is defined.
LOADED_MARKER = "_deploykit_settings_loaded"


def host_settings(host: Host, paths: list[str]) -> dict[str, Any]:
    """What the roles act on, as plain host variables: every setting under its own name with
    its default filled in, and every value computed here under a name of its own. Computed
    names are internal: a leading underscore and the role (or `deploykit` for all) that reads
    them, so they never collide with an inventory knob."""
    c = host.config
    serving = serving_host(host)
    settings = c.model_dump(mode="json", exclude=set(SECRET_KEYS))
    breaker_units, breaker_pattern = watch.breaker(host)
    settings |= {
        LOADED_MARKER: True,
        "_deploykit_header": names.HEADER,
        # where services listen and health gates knock: deploykit_address, else ansible_host
        # (which may be an ssh_config alias only the controller can resolve)
        "_deploykit_address": host.address,
        # every non-secret file rendered for this host (absolute paths on the host)
        "_deploykit_files": paths,
        "_ceph_rgw_instances": names.rgw_instance_names(host.name, c.ceph_rgw_count_per_host),
        # Consul re-reads these on SIGHUP; any other file under /etc/consul.d needs a restart
        "_consul_service_files": [p for p in paths if p in (
            names.CONSUL_SERVICE_PATH, names.CONSUL_ROUTER_SERVICE_PATH)],
        # what get_url checks a downloaded release against: never nothing
        "_consul_archive_checksum": consul_archive_checksum(c),
        "_coredns_archive_checksum": coredns_archive_checksum(c),
        "_coredns_binary_sha256": coredns_binary_sha256(c),
        "_ceph_rgw_has_stats_password": c.ceph_rgw_concentrator_monitor_password is not None,
        # the serving shape (plan/serving.py): topology, instances, restarts
        **serving.shape_settings(),
        # the heal task's unit and journal words: the converge record's own (watch.breaker)
        "_lmcache_breaker_units": breaker_units,
        "_lmcache_breaker_pattern": breaker_pattern,
        # the LMCache agent (render/self_heal.py): the program the role installs (this
        # controller's copy of deploy_kit/agents), the settings file the render writes for it,
        # and its units; the render writes a timer only where it runs, and the role stops one
        # it no longer finds there
        "_serving_agent_source": str(agents.LMCACHE_HEAL),
        # what a team host's LMCache server start runs to set the team's quota
        "_serving_quota_source": str(agents.LMCACHE_QUOTA),
        "_serving_agent_config": self_heal.CONFIG,
        "_serving_agent_units": [PurePosixPath(p).name for p in self_heal.UNITS],
        # the journal counter of LMCache's S3 trouble (render/monitoring.py), likewise
        "_monitoring_s3_events_source": str(agents.LMCACHE_S3_EVENTS),
        **watch.role_paths(host),
        **watch.role_units(host),
        **(router_settings(c) if "router" in host.groups else {}),
    }
    install = serving.install_settings()
    if install is None:
        return settings
    settings |= install | {
        # the role stages the directory again only when this changes (one read, not one
        # stat per file, on a re-run)
        "_vllm_model_digest": model_digest(c.vllm_model) if c.model_is_local else None,
        # a deploykit wheelhouse (requirements.lock): the serving role installs it whole
        "_serving_env_wheelhouse_lock": lock_digest(c.vllm_wheel_dir),
        "_serving_env_wheelhouse_archive": has_archive(c.vllm_wheel_dir),
    }
    return settings


def router_settings(c: HostConfig) -> dict[str, Any]:
    """What the router role installs from: the hash-pinned lock deploykit ships for
    router_version (copied to the host; pip --require-hashes installs exactly it), its
    digest (the venv's marker: equal, no copy and no pip run on a re-run), and whether
    router_wheel_dir is one archive (a staged directory, router_wheels.stage) or loose
    wheels."""
    lock = router_lock.lock_path(c.router_version)
    return {
        "_router_lock_path": str(lock),
        "_router_lock_digest": hashlib.sha256(lock.read_bytes()).hexdigest(),
        "_router_wheel_archive": has_archive(c.router_wheel_dir),
        # the front's keys file and the router's instance key, as on the serving hosts
        "_router_has_api_key": c.vllm_uses_api_key,
    }


@cache  # one walk per render, not one per serving host of a fleet sharing the model
def model_digest(directory: str) -> str | None:
    """What identifies a staged copy of a controller model directory: every file's relative
    path, size and modification time (hashing gigabytes of weights on each run would cost
    more than the copy it saves). None when the directory cannot be read: the role then
    stages it on every run, as before."""
    import hashlib
    import os

    entries = []
    try:
        for top, dirs, files in os.walk(directory, onerror=_raise):
            dirs.sort()
            for name in sorted(files):
                path = os.path.join(top, name)
                info = os.stat(path)
                entries.append(f"{os.path.relpath(path, directory)}\0{info.st_size}\0"
                               f"{info.st_mtime_ns}\n")
    except OSError:
        return None
    return hashlib.sha256("".join(entries).encode()).hexdigest()


def _raise(error: OSError) -> None:
    raise error


def site_facts(site: Site) -> dict[str, Any]:
    s = site.settings
    table = compat.ceph(s.deploykit_ceph_version)
    return {
        # "concentrator": cephadm runs it (explicit opt-in), so deploykit's HAProxy is not needed
        "ceph": {"concentrator": not deploykit_manages_concentrator(s),
                 "noautoscale_flag": table.has_noautoscale_flag, "release": table.release},
        "lifecycle": lifecycle_rules(s),
        # serving identity, its bucket policy, the ownership marker, the bucket quota
        "s3": s3_access.site_facts(site),
        # service addresses of the gateway hosts, inventory order (bucket setup uses the first)
        "gateways": [h.address for h in site.hosts.values() if "rgw" in h.groups],
        # cephadm mode: how many RGW daemons the applied spec must run
        "rgw_daemons": sum(h.config.ceph_rgw_count_per_host for h in site.group("rgw")),
        # every CoreDNS the serving hosts ask: a drained gateway waits until none names it
        "dns_servers": [dns_server(h) for h in site.hosts.values() if "dns" in h.groups],
    }


def dns_server(host: Host) -> str:
    port = host.config.coredns_port
    return f"[{host.address}]:{port}" if ":" in host.address else f"{host.address}:{port}"


def _json(data: Any) -> RenderedFile:
    return RenderedFile(json.dumps(data, indent=2, sort_keys=True) + "\n")


def with_settings(site: Site, tree: Tree, every_path: dict[str, list[str]] | None = None,
                  tls_sources: tls.Sources | None = None) -> Tree:
    """Add each host's settings and the site facts to a rendered tree (every_path: each
    host's rendered paths, secret files included, which its converge record watches;
    tls_sources: where a check-mode run's would-be TLS material is)."""
    for name, host in site.hosts.items():
        paths = sorted(path for path, f in tree[name].items() if not f.secret)
        settings = host_settings(host, paths)
        # what the host's converge record watches (roles/deploykit_common converged_*)
        settings["_deploykit_converged"] = converged.watch(
            host, (every_path or {}).get(name, paths))
        tls_paths = tls.issued_paths(site.root, host, tls_sources)
        if tls_paths is not None:  # controller paths of the issued material (no key inside)
            settings["_deploykit_tls_ca_cert_src"] = tls_paths["ca_cert"]
            if "host_pem" in tls_paths:
                settings["_ceph_rgw_tls_pem_src"] = tls_paths["host_pem"]
        settings.update(consul_tls.issued_paths(site.root, host, tls_sources) or {})
        tree[name] = {**tree[name], SETTINGS_PATH: _json(settings)}
    tree[CLUSTER] = {**tree[CLUSTER], SITE_PATH: _json(site_facts(site)),
                     INPUTS_PATH: _json(code_inputs(project_dir()))}
    return tree


def role_tree(site: Site, tls_sources: tls.Sources | None = None) -> Tree:
    """What a run hands the playbooks: the rendered site without its secret files."""
    full = render_site(site)
    tree = {host: {path: f for path, f in files.items() if not f.secret}
            for host, files in full.items()}
    return with_settings(site, tree, {host: sorted(files) for host, files in full.items()},
                         tls_sources)


def write_run_tree(site: Site, out: Path, tls_sources: tls.Sources | None = None) -> int:
    out.mkdir(parents=True, exist_ok=True)
    return write_tree(role_tree(site, tls_sources), out)
