"""Every file each host receives, keyed by host and absolute path: what `render` writes and
what the roles install (they call these same builders through deploykit's filter plugin)."""

from __future__ import annotations

import json
import locale
import os
import stat
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from deploy_kit.config import names
from deploy_kit.config.site import Host, Site
from deploy_kit.core.errors import DeployKitError
from deploy_kit.core.exit_codes import ExitCode
from deploy_kit.plan import lease
from deploy_kit.plan.serving import serving_host
from deploy_kit.render import (
    consul,
    dns,
    lmcache_quota,
    lmcache_server,
    monitoring,
    router,
    self_heal,
    serving_front,
    storage,
    vllm,
)
from deploy_kit.render.lmcache import render_lmcache_yaml
from deploy_kit.render.templating import render_template

CLUSTER = "_cluster"


@dataclass(frozen=True)
class RenderedFile:
    content: str
    mode: int = 0o644
    secret: bool = False


Tree = dict[str, dict[str, RenderedFile]]


def credentials_file(host: Host) -> RenderedFile:
    """AWS profile for LMCache/NIXL; unknown keys (locked vault) render as a marker, not ''."""
    c = host.config
    access = c.deploykit_s3_access_key.get_secret_value() if c.deploykit_s3_access_key \
        else "<vault:deploykit_s3_access_key>"
    secret = c.deploykit_s3_secret_key.get_secret_value() if c.deploykit_s3_secret_key \
        else "<vault:deploykit_s3_secret_key>"
    return RenderedFile(render_template("aws-credentials.j2", profile=names.aws_profile(c),
                                        access_key=access, secret_key=secret),
                        mode=0o600, secret=True)


def host_files(site: Site, host: Host) -> dict[str, RenderedFile]:
    c = host.config
    files: dict[str, RenderedFile] = {}
    if "rgw" in host.groups:
        if c.ceph_rgw_mode == "packages":
            files[names.RGW_CONF_PATH] = RenderedFile(storage.render_rgw_conf(host))
        if storage.deploykit_manages_concentrator(c):
            files[names.HAPROXY_CFG_PATH] = RenderedFile(storage.render_haproxy(host))
            files[storage.HAPROXY_DROPIN_PATH] = RenderedFile(storage.render_haproxy_dropin())
            files[storage.HAPROXY_STATS_ENV_PATH] = RenderedFile(
                storage.render_haproxy_stats_env(host), mode=0o600, secret=True)
        if c.deploykit_dns_mode == "consul":
            files[names.CONSUL_SERVICE_PATH] = RenderedFile(
                consul.dump_json(consul.s3_service(host)))
    if c.deploykit_dns_mode == "consul" and host.groups & names.CONSUL_AGENT_GROUPS:
        files[names.CONSUL_AGENT_PATH] = RenderedFile(
            consul.dump_json(consul.agent_config(site, host)))
        files[names.CONSUL_UNIT_PATH] = RenderedFile(render_template("consul.service.j2"))
    if "dns" in host.groups:
        files[f"{names.COREDNS_DIR}/Corefile"] = RenderedFile(dns.render_corefile(site, host))
        files[names.COREDNS_UNIT_PATH] = RenderedFile(render_template(
            "coredns.service.j2", corefile=f"{names.COREDNS_DIR}/Corefile"))
        if c.deploykit_dns_mode == "static":
            files[dns.zone_file_path(host)] = RenderedFile(dns.render_zone(site, host))
            if dns.router_name(site, host):
                files[dns.router_zone_file_path(host)] = RenderedFile(
                    dns.render_zone(site, host, "router"))
    if "vllm" in host.groups:
        if c.resolver_manage:
            files["/etc/resolv.conf"] = RenderedFile(dns.render_resolv_conf(site))
        if serving_host(host).inprocess:
            files[names.lmcache_config_path(c)] = RenderedFile(
                render_lmcache_yaml(c, host.geometry))
        else:
            files[lmcache_server.env_path(c)] = RenderedFile(lmcache_server.render_env_file(c))
            files[lmcache_server.UNIT_PATH] = RenderedFile(lmcache_server.render_unit(
                c, lmcache_quota.salt_quota(site, host)))
        if c.lmcache_mode in ("s3", "nixl"):
            files[names.credentials_path(c)] = credentials_file(host)
            files[names.aws_config_path(c)] = RenderedFile(render_template(
                "aws-config.j2", profile=names.aws_profile(c), region=c.deploykit_s3_region,
                endpoint_url=names.endpoint_url(c)))
        for instance in vllm.host_instances(host):
            files[names.vllm_env_path(c, instance.unit)] = RenderedFile(
                vllm.render_env_file(host, instance))
            files[names.vllm_unit_path(instance.unit)] = RenderedFile(
                vllm.render_unit(host, instance))
        # the public ports: vLLM itself listens on loopback only (render/serving_front.py)
        files[names.VLLM_FRONT_CFG_PATH] = RenderedFile(serving_front.render_config(site, host))
        files[names.VLLM_FRONT_UNIT_PATH] = RenderedFile(serving_front.render_unit())
        if lease.applies(host):
            files |= {path: RenderedFile(text, mode=mode) for path, (text, mode) in
                      self_heal.render(site, host).items()}
        if c.vllm_uses_api_key:
            files[vllm.secret_env_path(host)] = RenderedFile(
                vllm.render_secret_env(host), mode=0o600, secret=True)
        if site.group("monitoring") and c.monitoring_node_exporter_install:
            files[monitoring.NODE_EXPORTER_DEFAULTS_PATH] = RenderedFile(
                monitoring.render_node_exporter_defaults(host, names.HEADER))
            files |= {path: RenderedFile(text, mode=mode) for path, (text, mode) in
                      monitoring.render_s3_events(host).items()}
    if "router" in host.groups:
        files |= router_host_files(site, host)
    if "monitoring" in host.groups:
        files |= monitoring_host_files(site)
    return files


def router_host_files(site: Site, host: Host) -> dict[str, RenderedFile]:
    """A router host's vllm-router, its front, and its entry in the router name's set."""
    c = host.config
    files = {names.ROUTER_UNIT_PATH: RenderedFile(router.render_unit(site, host)),
             names.ROUTER_LAUNCHER_PATH: RenderedFile(router.render_launcher()),
             names.ROUTER_FRONT_CFG_PATH: RenderedFile(router.render_front(site, host)),
             names.ROUTER_FRONT_UNIT_PATH: RenderedFile(router.render_front_unit())}
    if c.vllm_uses_api_key:
        files[names.ROUTER_SECRET_ENV_PATH] = RenderedFile(router.render_secret_env(host),
                                                           mode=0o600, secret=True)
    if c.deploykit_dns_mode == "consul":
        files[names.CONSUL_ROUTER_SERVICE_PATH] = RenderedFile(
            router.dump(router.consul_service(host)))
    return files


def monitoring_host_files(site: Site) -> dict[str, RenderedFile]:
    """A monitoring host's Prometheus: its config, the targets and rules it reads, and the
    blackbox exporter's DNS probe of the S3 name."""
    m = monitoring
    files = {f"{m.TARGETS_DIR}/{job}.json": RenderedFile(text)
             for job, text in m.render_targets(site).items()}
    files[m.RULES_PATH] = RenderedFile(m.render_rules(site, names.HEADER))
    files[m.PROMETHEUS_CONFIG_PATH] = RenderedFile(m.render_prometheus_config(
        site, names.HEADER, m.TARGETS_DIR, m.RULES_PATH))
    files[m.BLACKBOX_CONFIG_PATH] = RenderedFile(m.render_blackbox_config(site, names.HEADER))
    files |= {path: RenderedFile(text) for path, text in m.render_defaults(
        site, names.HEADER).items()}
    return files


def monitoring_cluster_files(site: Site) -> dict[str, RenderedFile]:
    """What an existing Prometheus includes (paths relative to the directory, which
    Prometheus resolves against its config file), and the Grafana dashboard."""
    m = monitoring
    d = m.CLUSTER_DIR
    files = {f"{d}/targets/{job}.json": RenderedFile(text)
             for job, text in m.render_targets(site).items()}
    files[f"{d}/rules.yml"] = RenderedFile(m.render_rules(site, names.HEADER))
    files[f"{d}/rules.test.yml"] = RenderedFile(m.render_rule_tests(site, names.HEADER))
    files[f"{d}/prometheus.yml"] = RenderedFile(m.render_prometheus_config(
        site, names.HEADER, "targets", "rules.yml"))
    files[f"{d}/blackbox.yml"] = RenderedFile(m.render_blackbox_config(site, names.HEADER))
    files[f"{d}/dashboard.json"] = RenderedFile(m.render_dashboard(site))
    return files


def cluster_files(site: Site) -> dict[str, RenderedFile]:
    s = site.settings
    files = {
        "s3/lifecycle.json": RenderedFile(
            json.dumps(storage.lifecycle_rules(s), indent=2) + "\n"),
    }
    files |= monitoring_cluster_files(site)
    if s.ceph_rgw_mode == "cephadm":
        files["cephadm/rgw-spec.yaml"] = RenderedFile(storage.render_rgw_spec(site))
    servers = site.group("consul_servers")
    if s.deploykit_dns_mode == "consul" and servers and servers[0].config.consul_acl_enabled:
        files["consul/acl.json"] = RenderedFile(consul.dump_json(consul.acl_plan(site, servers[0])))
    return files


def render_site(site: Site) -> Tree:
    tree: Tree = {name: host_files(site, host) for name, host in sorted(site.hosts.items())}
    tree[CLUSTER] = cluster_files(site)
    return tree


class UnsafeOutput(DeployKitError):
    """render -o would leave OUT (a symlink already in OUT, a path with '..')."""

    exit_code = ExitCode.USAGE


def _safe_relative(host: str, path: str) -> PurePosixPath:
    rel = PurePosixPath(host) / path.lstrip("/")
    if host in ("", ".", "..") or "/" in host or any(p in ("..", ".") for p in rel.parts) \
            or rel.is_absolute():
        raise UnsafeOutput(f"refusing to write {host}:{path}: it would leave the output "
                           "directory", hint="host names and paths must be plain and absolute")
    return rel


def write_tree(tree: Tree, out: Path) -> int:
    """Write DIR/<host>/<absolute path>; returns the number of files written.

    Never leaves `out`: every path is checked to stay inside it, and an existing symlink
    (or non-directory) anywhere below `out` is refused instead of followed."""
    count = 0
    out.mkdir(parents=True, exist_ok=True)
    made: set[str] = set()  # most hosts share their directories' shape: mkdir once
    parts_of: dict[str, tuple[str, ...]] = {}  # hosts share their paths: parse each once
    encoding = locale.getpreferredencoding(False)  # what a text-mode open() would use
    for host, files in tree.items():
        for path, rendered in files.items():
            if path not in parts_of:
                parts_of[path] = _safe_relative(host, path).parts[1:]
            rel = (host, *parts_of[path]) if _safe_host(host) else \
                _safe_relative(host, path).parts
            for depth in range(1, len(rel)):
                parent = "/".join(rel[:depth])
                if parent not in made:
                    _make_directory(out / parent)
                    made.add(parent)
            _write_file(out / "/".join(rel), rendered, encoding)
            count += 1
    return count


def _safe_host(host: str) -> bool:
    """A host name that is one plain path component (see _safe_relative)."""
    return host not in ("", ".", "..") and "/" not in host


def _make_directory(directory: Path) -> None:
    try:
        os.mkdir(directory)
    except FileExistsError:
        if directory.is_symlink() or not directory.is_dir():
            raise UnsafeOutput(f"{directory} exists and is not a plain directory "
                               "(a symlink?): refusing to write through it",
                               hint="render into an empty directory") from None


def _write_file(target: Path, rendered: RenderedFile, encoding: str) -> None:
    # O_NOFOLLOW: an existing symlink at the file's place is refused, not followed;
    # create with the final mode so a secret is never briefly world-readable
    try:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW
                     | os.O_NONBLOCK, rendered.mode)
    except OSError as exc:
        raise UnsafeOutput(f"cannot write {target}: {exc.strerror} (a symlink or "
                           "special file is in the way?)",
                           hint="render into an empty directory") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise UnsafeOutput(f"{target} is not a regular file",
                               hint="render into an empty directory")
        if stat.S_IMODE(mode) != rendered.mode:  # a file already there, or the umask
            os.fchmod(fd, rendered.mode)
        data = memoryview(rendered.content.encode(encoding))
        while data:  # one write for a regular file; a loop all the same
            data = data[os.write(fd, data):]
    finally:
        os.close(fd)
