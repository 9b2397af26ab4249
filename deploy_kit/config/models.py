"""Typed host variables: every public knob deploykit and its roles read, with its default.

Keys that start with one of deploykit's prefixes are checked strictly (a misspelt key is an
error, not a silent default); other keys (ansible_*, a site's own variables) pass through.
"""

from __future__ import annotations

import ipaddress
import posixpath
import re
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationInfo,
    field_validator,
    model_validator,
)

from deploy_kit.config.edge_values import edge_value_problem, kind_of
from deploy_kit.core import compat

OWNED_PREFIXES = ("deploykit_", "ceph_rgw_", "consul_", "coredns_", "resolver_", "lmcache_",
                  "vllm_", "router_", "monitoring_")
SECRET_KEYS = ("deploykit_s3_access_key", "deploykit_s3_secret_key",
               "ceph_rgw_concentrator_monitor_password", "vllm_api_key",
               "vllm_api_key_next",
               # Consul ACL tokens and gossip key rule the cluster: vault only, like the S3 keys
               "consul_acl_management_token", "consul_acl_agent_token",
               "consul_acl_service_token", "consul_acl_dns_token", "consul_gossip_key",
               # the L2 encryption master key: whoever holds it reads every team's chunks
               "lmcache_l2_master_key")

# --- value types pasted into config text (Corefile, zone, HAProxy) ---------------------------
# A validator's ValueError reads "<problem>|<fix>"; site.py splits it into message and hint.
_LABEL = re.compile(r"^(?!-)[A-Za-z0-9-]{1,63}(?<!-)$")
# Ceph pool names: letters, digits, '.', '_', '-' (no spaces, quotes or shell syntax).
_POOL_NAME = re.compile(r"^[A-Za-z0-9_.][A-Za-z0-9_.-]{0,127}$")
# Every setting lands in some line-oriented text (a unit, an env file, a Corefile, ceph.conf,
# HCL, HAProxy): a line break there starts a directive of the writer's choosing
# (`ExecStartPre=+…` runs as root, `LD_PRELOAD=…`), a NUL truncates. So no value, key or
# element of any setting, secrets included, carries a C0 control character, DEL, or what
# parsers also read as a line break (NEL, U+2028, U+2029): one rule for every format.
_CONTROL = re.compile("[\x00-\x1f\x7f\x85\u2028\u2029]")
# Invisible format characters (a BOM, zero-width spaces and joiners, bidi marks and
# overrides, the soft hyphen): a value holding one differs from what every editor and
# log shows (`s3.example.com\u200b`, a right-to-left override turning a path around).
_INVISIBLE = re.compile("[\u00ad\u061c\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff]")
# POSIX portable user names (useradd's default pattern, no '$'): a unit's User=, chown
_USER_NAME = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")
_KINDS: dict[str, str] = {}  # setting -> int, float, bool or other (edge_values.kind_of)
_ACCOUNT = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
# environment variable names as env files and `systemd` read them
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# ports of services that run as their own user with no CAP_NET_BIND_SERVICE (HAProxy and
# CoreDNS may bind below 1024: HAProxy starts as root, CoreDNS's unit grants the capability)
UNPRIVILEGED_PORTS = {
    "ceph_rgw_frontend_port": "radosgw", "consul_dns_port": "consul",
    "consul_http_port": "consul", "vllm_loopback_port": "vLLM",
    "lmcache_server_port": "the LMCache server", "lmcache_server_http_port": "the LMCache server",
    "lmcache_server_metrics_port": "the LMCache server",
    "monitoring_prometheus_port": "Prometheus", "monitoring_blackbox_port": "the blackbox exporter",
    "monitoring_alertmanager_port": "Alertmanager",
    "monitoring_node_exporter_port": "the node exporter",
    "vllm_kv_events_loopback_port": "vLLM", "router_loopback_port": "the router",
    "router_metrics_port": "the router",
}
# a Prometheus duration deploykit writes into rules and the config, in Prometheus's own
# syntax (`15s`, `1d`, `1m30s`: units in descending order, each at most once); whole
# seconds (no `ms`). A zero total is refused by rules_monitoring.
_DURATION_UNITS = ("y", "w", "d", "h", "m", "s")
_DURATION = "^(?:" + "|".join(
    rf"\d{{1,6}}{u}" + "".join(rf"(?:\d{{1,6}}{v})?" for v in _DURATION_UNITS[i + 1:])
    for i, u in enumerate(_DURATION_UNITS)) + ")$"
# patterns too long to read in docs/settings.md, in words
PATTERN_WORDS = {_DURATION: "a Prometheus duration in whole seconds: `15s`, `1d`, `1m30s`"}
# Pinned versions: a release, never `latest`, a range, a URL or shell text. Consul, CoreDNS
# and Ceph release as X.Y.Z; vLLM and LMCache as PEP 440 public versions (no local `+tag`:
# PyPI has none). compat.yaml then says which releases deploykit supports.
RELEASE_VERSIONS = ("consul_version", "coredns_version", "deploykit_ceph_version")
PYTHON_VERSIONS = ("vllm_version", "lmcache_version")
# free strings and the character set each may use (they are pasted into argv, unit and
# daemon names, ceph.conf, YAML specs and Prometheus labels)
FREE_STRINGS: dict[str, tuple[re.Pattern[str], str, str]] = {
    "ceph_rgw_service_id": (re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]{0,62}"),
                            "a cephadm service id", "letters, digits, '_', '-', '.'"),
    "deploykit_ceph_mon_host": (re.compile(r"[A-Za-z0-9.:,/\[\] -]{1,2048}"),
                                "a ceph.conf `mon host`", "addresses, host names and "
                                "[v2:IP:port/0,v1:IP:port/0] lists as "
                                "`ceph config generate-minimal-conf` writes them"),
    "ceph_rgw_s3_display_name": (re.compile(r"[A-Za-z0-9][A-Za-z0-9 _.,:()@+-]{0,127}"),
                                 "a plain display name", "letters, digits, spaces and "
                                 "_ . , : ( ) @ + -"),
    "lmcache_nixl_backend": (re.compile(r"[A-Za-z0-9_]{1,64}"), "a NIXL plugin name",
                             "letters, digits and '_', e.g. OBJ"),
    "vllm_dtype": (re.compile(r"[a-z0-9_]{1,32}"), "a vLLM --dtype",
                   "one of vLLM's dtypes, e.g. auto, bfloat16, float16"),
    "vllm_served_model_name": (re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,255}"),
                               "a served model name", "letters, digits and . _ : / @ + -"),
    "vllm_model": (re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}(/[A-Za-z0-9._-]{1,96})?"),
                   "a Hugging Face model id or an absolute path",
                   "owner/name of letters, digits, '.', '_' and '-', or an absolute path"),
}
_RELEASE = re.compile(r"(0|[1-9]\d{0,5})\.(0|[1-9]\d{0,5})\.(0|[1-9]\d{0,5})")
_PEP440 = re.compile(r"(0|[1-9]\d{0,5})(\.(0|[1-9]\d{0,5})){1,3}((a|b|rc)\d{1,4})?"
                     r"(\.post\d{1,4})?(\.dev\d{1,4})?")


def control_character_problem(value: Any, where: str = "") -> str | None:
    """Where in `value` (a string, a secret, or lists/dicts of them) a control character
    sits, or None. Never quotes the value: it may be a secret."""
    if isinstance(value, SecretStr):
        value = value.get_secret_value()
    if isinstance(value, str):
        found = _CONTROL.search(value)
        if found is None:
            invisible = _INVISIBLE.search(value)
            return None if invisible is None else (
                f"{where or 'the value'} holds the invisible character "
                f"U+{ord(invisible.group()):04X} at position {invisible.start()}")
        name = {"\n": "a line break", "\r": "a carriage return", "\x00": "a NUL byte",
                "\t": "a tab"}.get(found.group(), f"control character U+{ord(found.group()):04X}")
        return f"{where or 'the value'} holds {name} at position {found.start()}"
    if isinstance(value, dict):
        for key, item in value.items():
            problem = control_character_problem(key, f"key {str(key)[:40]!r}") or \
                control_character_problem(item, f"the value of {str(key)[:40]!r}")
            if problem:
                return problem
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            problem = control_character_problem(item, f"element {i}")
            if problem:
                return problem
    return None


def dns_name_problem(name: str, min_labels: int = 2) -> str | None:
    """Why `name` is not an RFC 1123 host name (labels <= 63, total <= 253), or None."""
    labels = name.split(".")
    if not name or len(name) > 253 or not all(_LABEL.match(x) for x in labels):
        return (f"{name!r} is not a valid DNS name (RFC 1123: letters, digits and '-', "
                "labels of at most 63 characters, at most 253 in all)")
    if len(labels) < min_labels:
        return f"{name!r} is not a fully qualified name"
    return None


def _is_ip(value: str) -> bool:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return True


def _absolute_path(value: str) -> str:
    # normpath keeps a leading `//` (POSIX leaves its meaning open): refused as well
    if value and (not value.startswith("/") or posixpath.normpath(value) != value
                  or value.startswith("//") or "\n" in value or "\x00" in value):
        raise ValueError(f"{value!r} is not an absolute, normalised path|use an absolute path "
                         "without '..', '//' or a trailing '/', e.g. /etc/deploykit")
    return value


Accelerator = Literal["cuda", "rocm", "gaudi3", "cpu"]
LMCacheMode = Literal["s3", "nixl", "dram", "disk"]
# the rows of compat.yaml `accelerator_models` (a unit test keeps the two lists equal)
AcceleratorModelName = Literal["h100", "h200", "b200", "a100", "l40s", "mi300x", "mi325x",
                               "gaudi3", "cpu"]


class PoolSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    name: str
    pg_num: int = Field(gt=0, le=1_048_576)
    pgp_num: int | None = Field(default=None, gt=0, le=1_048_576)
    size: int = Field(default=2, ge=1, le=10)
    min_size: int = Field(default=1, ge=1, le=10)
    application: str = "rgw"

    @field_validator("name", "application")
    @classmethod
    def _pool_name(cls, value: str) -> str:
        if not _POOL_NAME.match(value):
            raise ValueError(f"{value!r} is not a valid Ceph pool/application name|use "
                             "letters, digits, '.', '_' and '-' (at most 128)")
        return value


DEFAULT_POOLS = (
    PoolSpec(name="default.rgw.buckets.data", pg_num=2048, size=2, min_size=1),
    PoolSpec(name="default.rgw.buckets.index", pg_num=64, size=2, min_size=1),
    PoolSpec(name="default.rgw.buckets.non-ec", pg_num=64, size=2, min_size=1),
)


# a team's name: it is part of an RGW uid, a bucket name and a cache_salt
_TEAM_NAME = r"^[a-z][a-z0-9-]{0,18}[a-z0-9]$"
# what vLLM sends LMCache as cache_salt and LMCache puts in each key and HKDF info: no `@`
# (ObjectKey refuses it), no `/` (the quota API takes it as a path segment), nothing a shell,
# a URL or a bucket policy reads specially
_SALT = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"


class Team(BaseModel):
    """One team on the shared tier (docs/teams.md): its own RGW identity and bucket, a quota,
    and the cache_salt its clients send."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    name: str = Field(pattern=_TEAM_NAME)
    # the vllm_model values this team serves: their hosts are the team's (unless a host
    # names another team in lmcache_team)
    models: list[str] = Field(min_length=1, max_length=64)
    # what the team's clients send as `cache_salt` (vLLM's per-request field); unset: the
    # team's name. Server topology: it keys the team's chunks, its LMCache quota and its
    # encryption key
    cache_salt: str | None = Field(default=None, pattern=_SALT)
    # the team's bucket quota in bytes; unset: the bytes `plan` computes for its models'
    # deploykit_cache_target_tokens; 0: none
    quota_bytes: int | None = Field(default=None, ge=0, le=2**62)
    # the team's bucket; unset: <deploykit_s3_bucket>-<name>
    bucket: str | None = Field(default=None, min_length=3, max_length=63,
                               pattern=r"^[a-z0-9][a-z0-9-]+[a-z0-9]$")

    @property
    def salt(self) -> str:
        return self.cache_salt or self.name


class HostConfig(BaseModel):
    """The effective variables of one host after group/host precedence."""

    # NaN and infinity pass every range check (NaN compares false): refused as a class
    model_config = ConfigDict(extra="ignore", frozen=True, allow_inf_nan=False)

    # --- site: the S3 name every client uses, versions, secrets ---------------------------
    # the name every S3 client uses, and <bucket>.<name> (LMCache's requests are
    # virtual-hosted): the site's DNS answers both with the gateways
    deploykit_s3_fqdn: str = "s3.cephlab.com"
    # the bucket of the LMCache objects (no dot: virtual-hosted names carry it as a label)
    deploykit_s3_bucket: str = Field(default="lmcache", min_length=3, max_length=63,
                                     pattern=r"^[a-z0-9][a-z0-9.-]+[a-z0-9]$")
    # the gateways' S3 port, where each HAProxy concentrator listens (443 is usual with TLS)
    deploykit_s3_port: int = Field(default=80, ge=1, le=65535)
    # the region S3 requests are signed for (LMCache's s3_region, the hosts' AWS profile)
    deploykit_s3_region: str = "default"
    # HTTPS to the gateways with certificates from the site CA; LMCache's disable_tls follows
    deploykit_s3_tls: bool = False
    # TLS (deploykit_s3_tls: true): the site CA. Unset: deploykit creates one once per
    # inventory in deploykit_tls_dir. Set: controller paths of an existing CA (PEM) whose
    # key may be read by its owner only. The concentrator certificates are issued from it.
    deploykit_tls_ca_cert: str | None = None
    # controller path of an existing CA's private key (PEM, no group/other access);
    # set with deploykit_tls_ca_cert
    deploykit_tls_ca_key: str | None = None
    # controller directory (0700) for the created CA and the issued certificates; relative
    # paths are relative to the inventory directory; default <inventory>/.deploykit-tls
    deploykit_tls_dir: str | None = None
    # where each host keeps the record of its last converge (roles/deploykit_common)
    deploykit_common_record_path: str = "/var/lib/deploykit/converged.json"
    # lifetime of each concentrator certificate; `up` reissues one with less than 30 days
    # (verify's warning threshold) or a third of its lifetime left
    deploykit_tls_cert_days: int = Field(default=365, ge=2, le=3650)
    deploykit_s3_access_key: SecretStr | None = None
    deploykit_s3_secret_key: SecretStr | None = None
    # S3 name's answers: consul (Consul's healthy concentrators; needs consul_servers)
    # or static (all RGW hosts)
    deploykit_dns_mode: Literal["consul", "static"] = "consul"
    # TTL (s) of the S3 name's answers (Consul service_ttl / zone $TTL);
    # rolling restarts wait it out after a drain
    deploykit_dns_ttl: int = Field(default=5, ge=0, le=3600)
    deploykit_ceph_version: str = "20.2.4"  # newest compat.yaml `verified` release
    # OSDs in the cluster: `plan` reports PG replicas per OSD (warns above 250); unset: not computed
    deploykit_ceph_osd_count: int | None = Field(default=None, ge=1, le=100_000)
    # tokens the shared cache should hold; `plan` sizes the bucket's capacity from it
    deploykit_cache_target_tokens: int = Field(default=100_000_000, ge=0, le=10**15)
    deploykit_address: str | None = None  # defaults to ansible_host
    # `plan`'s break-even table: the GET throughput one serving host gets from S3, Gbit/s
    # (measure it with `deploykit bench storage`)
    deploykit_storage_gbps: float = Field(default=25.0, gt=0, le=100_000)
    # packages-mode gateways need the cluster's identity (`ceph config generate-minimal-conf`)
    deploykit_ceph_fsid: str | None = Field(default=None, pattern=r"^[0-9a-f-]{36}$")
    # packages mode (required): the `mon host` of the gateways' ceph.conf (generate-minimal-conf)
    deploykit_ceph_mon_host: str | None = None
    deploykit_ceph_conf: str = "/etc/ceph/ceph.conf"  # on the ceph_admin host

    # --- ceph_rgw: gateways and the per-host HAProxy concentrator -------------------------
    ceph_rgw_mode: Literal["cephadm", "packages"] = "cephadm"
    ceph_rgw_service_id: str = "standard"
    # cephadm, multisite only: the realm, zonegroup and zone the RGW service belongs to.
    # All three set: the spec names them and writes the S3 name into the zonegroup's
    # hostnames. Unset (single site): `rgw_dns_name` alone routes virtual-hosted requests.
    ceph_rgw_realm: str | None = None
    # multisite: the zonegroup name (set with ceph_rgw_realm and ceph_rgw_zone, or none of them)
    ceph_rgw_zonegroup: str | None = None
    # multisite: the zone name (set with ceph_rgw_realm and ceph_rgw_zonegroup, or none of them)
    ceph_rgw_zone: str | None = None
    ceph_rgw_count_per_host: int = Field(default=4, ge=1, le=64)
    ceph_rgw_frontend_port: int = Field(default=8080, ge=1, le=65535)
    ceph_rgw_concentrator_monitor_port: int = Field(default=1967, ge=1, le=65535)
    # login of the concentrator's HAProxy stats page (/stats on ceph_rgw_concentrator_stats_port)
    ceph_rgw_concentrator_monitor_user: str = "admin"
    # the HAProxy stats page (/stats, with that login): on 127.0.0.1 (reach it through an SSH
    # tunnel) unless ceph_rgw_concentrator_stats_public
    ceph_rgw_concentrator_stats_port: int = Field(default=1968, ge=1, le=65535)
    # opt-out: serve /stats on every address (over TLS with deploykit_s3_tls, else plain
    # HTTP: the login can then be read off the network)
    ceph_rgw_concentrator_stats_public: bool = False
    # CIDRs: cephadm spec `networks` (where gateways bind); IP ranges the created CA may vouch for
    ceph_rgw_networks: list[str] = Field(default_factory=list)
    ceph_rgw_concentrator_maxconn: int = Field(default=20000, ge=64, le=10_000_000)  # needs 2x fds
    # seconds a stopping radosgw gives requests in flight; cephadm's container stop waits 10 s more
    ceph_rgw_exit_timeout_secs: int = Field(default=120, ge=0, le=3600)
    # rolling restarts: how long a drain may wait for DNS to drop (or re-add) a host and for
    # a gateway's open requests to finish before the run fails
    ceph_rgw_drain_timeout: int = Field(default=120, ge=1, le=3600)
    # packages mode: `rgw thread pool size` of each gateway (cephadm mode does not set it)
    ceph_rgw_thread_pool_size: int = Field(default=512, ge=8, le=65536)
    # cores of each RGW host: ceph_rgw_count_per_host may not exceed it (unset: not checked)
    ceph_rgw_host_cpus: int | None = Field(default=None, ge=1, le=4096)
    ceph_rgw_pools_list: list[PoolSpec] = Field(default_factory=lambda: list(DEFAULT_POOLS))
    # also set Ceph's cluster-wide `noautoscale` flag, which stops the PG autoscaler for every
    # pool of the cluster (a shared cluster's RBD/CephFS too); deploykit's own pools get
    # autoscale_mode off either way. Recorded (config-key deploykit/noautoscale): `down`, or
    # a run with this false, clears the flag only when deploykit set it
    ceph_rgw_pools_noautoscale: bool = False
    # RGW user that owns the cache bucket (its keys stay on the admin host); each model's
    # serving hosts get the user `<ceph_rgw_s3_user>-serving-<model>`, limited by the bucket
    # policy to that model's keys (docs/storage.md); at most 47 characters
    ceph_rgw_s3_user: str = "lmcache"
    ceph_rgw_s3_display_name: str = "LMCache KV cache"
    ceph_rgw_s3_lifecycle_days: int = Field(default=7, ge=0, le=36500)
    # RGW bucket quota in bytes; unset: the bytes `plan` computes for
    # deploykit_cache_target_tokens; 0: no quota (then lifecycle days must not be 0)
    ceph_rgw_s3_quota_bytes: int | None = Field(default=None, ge=0, le=2**62)
    # adopt (mark, manage and, with down --yes-i-really-mean-it, delete) an RGW user or
    # bucket of the configured names that deploykit did not create; off: refused
    ceph_rgw_s3_adopt_existing: bool = False
    # teams sharing the tier (docs/teams.md): each gets its own RGW identity, bucket and
    # quota, and clients send its cache_salt. [] (default): one trust domain, the site bucket
    teams: list[Team] = Field(default_factory=list, max_length=256)
    # the team whose identity and bucket this serving host's LMCache uses; unset: the one
    # team that lists the host's vllm_model (none lists it: no team)
    lmcache_team: str | None = Field(default=None, pattern=_TEAM_NAME)
    # the bucket this serving host's LMCache shares (its sharing group: every host of a
    # bucket must agree on the key format); unset: its team's bucket, else deploykit_s3_bucket.
    # E.g. Gaudi3 hosts (in-process) beside CUDA/ROCm hosts (server topology)
    lmcache_s3_bucket: str | None = Field(default=None, min_length=3, max_length=63,
                                          pattern=r"^[a-z0-9][a-z0-9-]+[a-z0-9]$")
    # deploykit's own per-host HAProxy by default: no upstream Ceph release up to 20.2.4 has
    # the cephadm RGW spec `concentrator` fields (downstream IBM Storage Ceph 8.1 does), so
    # `cephadm` is an explicit opt-in for such builds (deploy_kit/data/compat.yaml).
    ceph_rgw_concentrator: Literal["deploykit", "cephadm"] = "deploykit"
    # HAProxy stats page password (vault); unset: generated on each RGW host, kept 0600 there
    ceph_rgw_concentrator_monitor_password: SecretStr | None = None

    # --- consul / coredns / resolver: one name, one A record per concentrator -------------
    consul_datacenter: str = "dc1"  # Consul datacenter of every agent (a DNS label)
    consul_data_dir: str = "/opt/consul"
    # Consul servers to wait for before the first leader election; unset: all consul_servers hosts
    consul_bootstrap_expect: int | None = Field(default=None, ge=1, le=99)
    # Consul's DNS port on each agent; CoreDNS forwards the S3 name to it on every Consul server
    consul_dns_port: int = Field(default=8600, ge=1, le=65535)
    consul_http_port: int = Field(default=8500, ge=1, le=65535)
    # Consul's HTTP API (and gRPC): loopback by default, since with ACLs off anyone who
    # reaches it can register an `s3` instance. The roles and verify use it on the host
    # itself; DNS listens on the host's address as well (CoreDNS forwards to it).
    consul_http_address: str = "127.0.0.1"
    # Consul service each RGW host registers; CoreDNS rewrites the S3 name to <name>.service.consul
    consul_service_name: str = "s3"
    # how often Consul checks each concentrator's /health; a failing host drops out of DNS answers
    consul_check_interval: str = Field(default="10s", pattern=r"^\d+(ms|s|m)$")
    # timeout of Consul's /health check of each concentrator (a slower answer fails the check)
    consul_check_timeout: str = Field(default="2s", pattern=r"^\d+(ms|s|m)$")
    # 1.16.x is the last MPL-2.0 line (1.17 and later are BUSL); 1.16.3 its newest release
    consul_version: str = "1.16.3"
    # port CoreDNS answers on; hosts using deploykit's resolv.conf can only ask port 53
    coredns_port: int = Field(default=53, ge=1, le=65535)
    # resolvers for all other names: IP[:port] or resolv.conf paths; empty: only the S3 name
    coredns_upstream: list[str] = Field(default_factory=lambda: ["/etc/resolv.conf"])
    # sources CoreDNS answers (its acl plugin; any other source gets REFUSED), loopback always.
    # Unset: the /24 (IPv4) or /64 (IPv6) around each inventory host's address. A list
    # replaces that: CIDRs or addresses, with the clients that are not inventory hosts (and
    # the controller, for `verify`); ["0.0.0.0/0", "::/0"] answers everyone (the opt-out)
    coredns_allowed_networks: list[str] | None = Field(default=None, max_length=4096)
    # addresses or interface names CoreDNS takes DNS queries on; unset: the host's own
    # address and 127.0.0.1; []: every address (the opt-out)
    coredns_bind: list[str] | None = Field(default=None, max_length=256)
    # CoreDNS's `health` endpoint (HTTP /health)
    coredns_health_port: int = Field(default=8053, ge=1, le=65535)
    coredns_ready_port: int = Field(default=8181, ge=1, le=65535)
    # CoreDNS's Prometheus metrics (`prometheus` plugin), scraped by the monitoring host
    coredns_metrics_port: int = Field(default=9153, ge=1, le=65535)
    coredns_version: str = "1.12.1"
    coredns_binary_src: str | None = None  # a binary on the controller (air-gapped, lab)
    coredns_binary_url: str = ("https://github.com/coredns/coredns/releases/download/"
                               "v{version}/coredns_{version}_linux_amd64.tgz")
    # The same two pins as Consul's: the installed binary's sha256 (coredns_binary_src or the
    # release's binary; the install fails on a mismatch) and the downloaded archive's (unset:
    # the `.sha256` CoreDNS publishes beside every release archive).
    coredns_binary_sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")
    coredns_archive_sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")
    # The older single knob, still read: the controller binary's pin with coredns_binary_src,
    # else the archive's (the two knobs above win over it).
    coredns_binary_checksum: str = Field(default="", pattern=r"^(sha256:)?([0-9a-f]{64})?$")
    consul_binary_src: str | None = None
    consul_binary_url: str = ("https://releases.hashicorp.com/consul/{version}/"
                              "consul_{version}_linux_amd64.zip")
    # sha256 of the consul binary the role installs (consul_binary_src or the release's
    # binary); the install fails on a mismatch
    consul_binary_sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")
    # sha256 of the downloaded release archive; unset: deploykit's pin for consul_version
    # (compat.yaml), else the release's own SHA256SUMS beside consul_binary_url
    consul_archive_sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")
    consul_raft_multiplier: int | None = Field(default=None, ge=1, le=10)  # 1: fastest failover
    consul_leave_on_terminate: bool | None = None  # None: Consul's default (clients leave)
    # Consul's retry_interval between retry_join attempts (e.g. 5s); unset: Consul's default
    consul_retry_interval: str | None = Field(default=None, pattern=r"^\d+(ms|s|m)$")
    # ACLs (default deny) and gossip encryption, on by default: the tokens and key come from
    # the vault, else deploykit generates them on the first `up` into the inventory's
    # committed vault file (docs/security.md). false: an explicit opt-out that `plan` warns
    # about
    consul_acl_enabled: bool = True
    # ACL default_policy: deny grants only what a token's policies allow; allow permits the rest
    consul_acl_default_policy: Literal["deny", "allow"] = "deny"
    consul_acl_management_token: SecretStr | None = None  # initial_management (servers)
    consul_acl_agent_token: SecretStr | None = None  # node registration, every agent
    consul_acl_service_token: SecretStr | None = None  # registers the s3 service
    consul_acl_dns_token: SecretStr | None = None  # default token: DNS, verify (read only)
    # encrypt and verify Consul gossip with consul_gossip_key (vault, else generated);
    # false: an explicit opt-out that `plan` warns about
    consul_gossip_encryption: bool = True
    consul_gossip_key: SecretStr | None = None  # `consul keygen`: base64 of 32 bytes
    # mutual TLS on Consul's internal RPC (agents to servers, servers to servers): a Consul
    # CA of deploykit's own (beside the site CA, name-constrained to `consul`) issues each
    # agent a certificate on `up`; servers must present server.<datacenter>.consul. The HTTP
    # API stays plain on loopback. Off by default (opt-in: docs/security.md says why)
    consul_tls_enabled: bool = False
    resolver_manage: bool = True

    # --- lmcache ----------------------------------------------------------------------
    lmcache_version: str = "0.5.6"
    # LMCache's store: s3 (the bucket), nixl (the bucket via NIXL OBJ), dram (host RAM only),
    # disk (lmcache_disk_path)
    lmcache_mode: LMCacheMode = "s3"
    # tokens per LMCache chunk (one S3 object per rank);
    # a multiple of the vLLM block size, one value fleet-wide
    lmcache_chunk_size: int = Field(default=256, ge=1, le=1_048_576)
    lmcache_local_cpu: bool | None = None  # None: the mode's default
    lmcache_max_local_cpu_size: float | None = Field(default=None, ge=0, le=65536)  # GB per worker
    # also store a prefix's partial last chunk; must stay false with s3 and nixl (they refuse those)
    lmcache_save_unfull_chunk: bool = False
    # LMCache's enable_async_loading: asynchronous lookups and loads in vLLM (in-process topology)
    lmcache_enable_async_loading: bool = True
    # seconds LMCache waits for each remote get (blocking_timeout_secs; in-process topology)
    lmcache_blocking_timeout_secs: int = Field(default=100, ge=1, le=86400)
    # serialiser for s3/nixl objects (in-process); naive stores raw KV, the size `plan` assumes
    lmcache_remote_serde: Literal["naive", "kivi", "cachegen"] = "naive"
    # the chunk-key hash (LMCache's pre_caching_hash_algorithm; the server's --hash-algorithm):
    # sha256_cbor or sha256 (vLLM's SHA-256: no client can aim a prompt at another prefix's
    # key); builtin: Python's hash, keyed only by vllm_python_hash_seed (the opt-out). One value
    # on every host sharing the bucket. LMCache 0.3.x knows only builtin (its default there)
    lmcache_pre_caching_hash_algorithm: Literal["sha256_cbor", "sha256", "builtin"] = "sha256_cbor"
    lmcache_s3_num_io_threads: int = Field(default=64, ge=1, le=4096)
    lmcache_s3_prefer_http2: bool = False
    lmcache_s3_max_inflight_reqs: int = Field(default=64, ge=1, le=65536)  # 0.3.x only
    # NIXL storage plugin for lmcache_mode nixl; the backend params deploykit writes are OBJ's (S3)
    lmcache_nixl_backend: str = "OBJ"
    # 0: dynamic, content-addressed
    lmcache_nixl_pool_size: int = Field(default=0, ge=0, le=10_000_000)
    # NIXL's staging buffer in nixl mode: cpu (LMCache's CPU pool) or cuda (GPU memory;
    # CUDA/ROCm hosts only)
    lmcache_nixl_buffer_device: Literal["cpu", "cuda"] = "cpu"
    # bytes of NIXL's buffer with lmcache_nixl_buffer_device cuda (required there), a multiple
    # of the chunk object size; unset with cpu
    lmcache_nixl_buffer_size: int | None = Field(default=None, ge=1, le=2**42)
    # with TLS: the system CA bundle NIXL's bundled libcurl reads (the store the serving
    # role adds the site CA to): Debian/Ubuntu's; RHEL family: /etc/pki/tls/certs/ca-bundle.crt
    lmcache_nixl_ca_bundle: str = "/etc/ssl/certs/ca-certificates.crt"
    # NIXL OBJ's crtMinLimit (bytes): objects this size or larger go through the S3 CRT client,
    # whose part size it also is (nixl v1.4.0 src/plugins/obj/README.md:72,83-85). Unset: the
    # chunk object size capped at awscrt's 8 MiB part, when the object is at least 5 MiB (the
    # CRT's smallest part); 0: CRT off (every object on the plain S3 client)
    lmcache_nixl_crt_min_limit: int | None = Field(default=None, ge=0, le=2**40)
    # disk mode: directory LMCache keeps chunks in (in-process: local_disk; server: its fs L2)
    lmcache_disk_path: str = "/var/cache/lmcache"
    # disk mode, in-process topology: GB LMCache may keep in lmcache_disk_path (max_local_disk_size)
    lmcache_max_local_disk_size: float = Field(default=100.0, ge=0, le=10**6)
    # keys merged last into lmcache.yaml's extra_config (they win; nixl_backend_params is
    # merged key by key into the rendered one); owned keys, unknown s3_* keys and credentials
    # are refused
    lmcache_extra_config: dict[str, Any] = Field(default_factory=dict)
    # LMCache's min_retrieve_tokens (in-process topology; LMCache 0.3.14 and later): a hit of
    # fewer new tokens is recomputed, not read. Unset: the serving group's break-even (`plan`:
    # the prompt length from which reading the KV at deploykit_storage_gbps beats recompute),
    # rounded up to whole chunks; not rendered on cpu hosts without vllm_prefill_tflops
    # (their peak is a guess). 0: every hit is read
    lmcache_min_retrieve_tokens: int | None = Field(default=None, ge=0, le=10**8)
    # other top-level keys for lmcache.yaml (in-process topology), e.g. lookup_timeout_ms:
    # only keys the pinned LMCache reads (data/lmcache_keys.yaml) and deploykit does not render
    lmcache_top_level_config: dict[str, Any] = Field(default_factory=dict)
    lmcache_config_dir: str = "/etc/deploykit"
    lmcache_install: bool = True
    lmcache_wheel_dir: str = ""
    # inprocess: LMCache inside vLLM (LMCacheConnectorV1, the seed's layout); server: a
    # standalone `lmcache server` unit per host (L1 DRAM + the remote tier as its L2) and
    # vLLM's LMCacheMPConnector. Unset: the LMCache series' default for the accelerator
    # (compat.yaml `default_topology`: server where LMCache can drive the transfer, which is
    # upstream's direction; inprocess on gaudi3, whose LMCache has no lmcache_driven path,
    # and in nixl mode, whose server adapter shares no keys).
    # One value for every host that shares the bucket (the two key formats differ).
    lmcache_topology: Literal["inprocess", "server"] = Field(
        default="inprocess", json_schema_extra={"default_text": "per accelerator"})
    lmcache_server_port: int = Field(default=6555, ge=1, le=65535)  # vLLM <-> server (ZMQ)
    lmcache_server_http_port: int = Field(default=6556, ge=1, le=65535)  # health, admin
    lmcache_server_metrics_port: int = Field(default=6557, ge=1, le=65535)  # Prometheus
    # the LMCache server's L1 (DRAM) in GiB; unset: computed by `plan` as one
    # vllm_max_model_len request's KV (every rank) x the host's instances, at most half of
    # vllm_host_memory_gb; set: at least one such request
    lmcache_server_l1_size_gb: float | None = Field(default=None, gt=0, le=65536)
    # the LMCache server's L1 (DRAM) eviction policy (--eviction-policy)
    lmcache_server_eviction_policy: Literal["LRU"] = "LRU"
    # server topology: the LMCache server encrypts every chunk it writes to the S3 bucket
    # (AES-GCM, a key per cache_salt derived by HKDF from a master key `up` generates into
    # the site's secrets and ships 0600; docs/teams.md). L1 (DRAM) stays plaintext. One
    # value for every host of a bucket
    lmcache_l2_encryption: bool = False
    # the AES key size of lmcache_l2_encryption
    lmcache_l2_encryption_aes_bits: Literal[128, 256] = 256
    # the master key lmcache_l2_encryption derives each cache_salt's AES key from (HKDF):
    # base64 of 32 random bytes, from the vault, else generated on the first `up` into the
    # site's secrets; written 0600 to the serving hosts, never into argv or a rendered file.
    # A new value makes every stored chunk unreadable (`deploykit secrets rotate l2-key`)
    lmcache_l2_master_key: SecretStr | None = None
    # the LMCache server's worker threads (--max-workers)
    lmcache_server_max_workers: int = Field(default=2, ge=1, le=256)
    # vLLM's wait for the server, s
    lmcache_server_mq_timeout: int = Field(default=120, ge=1, le=86400)
    # LMCache turns its S3 tier off for the life of the process after three connection
    # errors (its breaker): a timer on each serving host restarts a tripped process once S3
    # answers again, a few hosts of the model at a time, ahead of any scheduled restart
    # (render/self_heal.py, docs/day2.md)
    lmcache_self_heal: bool = True
    # minutes before healing a host again whose last heal did not hold (its gate failed, or
    # a unit it restarted tripped again within 2 minutes); doubled for each further such
    # heal, up to 16 times it. A trip later than that is a new outage: healed at once
    lmcache_self_heal_backoff: int = Field(default=10, ge=1, le=1440)
    # server topology on GPU hosts: a breaker heal restarts the LMCache server alone (vLLM's
    # LMCacheMPConnector re-registers with it; an instance that does not is restarted too);
    # false: the server, then each instance, as the scheduled restart does
    lmcache_self_heal_server_only: bool = True
    # a rolling restart of every serving host after each RGW lifecycle window, so no process
    # trusts its record of an object lifecycle expiry deleted (docs/day2.md); a few hosts of
    # the model at a time (lmcache_scheduled_restart_slots), health-gated
    lmcache_scheduled_restart: bool = True
    # systemd OnCalendar of that restart; unset: daily at the end of RGW's lifecycle window
    # (rgw_lifecycle_work_time, 00:00-06:00 unless the cluster changed it)
    lmcache_scheduled_restart_calendar: str | None = Field(
        default=None, pattern=r"^[A-Za-z0-9*:.,/~ -]{1,100}$",
        json_schema_extra={"default_text": "daily 06:00"})
    # the latest start after the calendar time, s (each host draws its own delay)
    lmcache_scheduled_restart_delay: int = Field(default=1800, ge=0, le=86400)
    # hosts of one model that restart at once (each pool: scheduled restarts, breaker
    # heals); unset: one per 10 hosts of the model (plan/lease.py)
    lmcache_scheduled_restart_slots: int | None = Field(
        default=None, ge=1, le=1000, json_schema_extra={"default_text": "hosts / 10, at most "
                                                                      "vllm_serial"})

    # --- vllm -------------------------------------------------------------------------
    # unset: compat.yaml `default_vllm_version` for the host's accelerator (cuda 0.32.0,
    # rocm 0.34.0, gaudi3 0.26.0, cpu 0.32.0); without an accelerator the newest row
    vllm_version: str = "0.34.0"
    # required on vllm hosts: cuda, rocm, gaudi3 or cpu; picks builds, env and default block size
    vllm_accelerator: Accelerator | None = None
    # the device model: its memory (the HBM fit rule) and peak FLOPS (the planner), from
    # compat.yaml `accelerator_models`; must run on vllm_accelerator (h100 needs cuda).
    # None: h100 on cuda, mi300x on rocm, gaudi3, cpu
    vllm_accelerator_model: AcceleratorModelName | None = None
    # measured prefill TFLOPS per device (bench/gpu-prefill.py); replaces peak x efficiency
    vllm_prefill_tflops: float | None = Field(default=None, gt=0, le=100_000)
    # HF model id or an absolute controller path (staged to vllm_models_dir); one string on
    # every host of a model (a site may serve several, each with its own S3 identity)
    vllm_model: str = "Qwen/Qwen3-32B"
    vllm_model_config: str | None = None  # local HF config.json for geometry
    # where a local model directory (vllm_model: /path on the controller) is staged on hosts
    vllm_models_dir: str = "/var/lib/vllm/models"
    # --tensor-parallel-size; each rank stores its own object per chunk; same on every vllm host
    vllm_tensor_parallel_size: int = Field(default=1, ge=1, le=64)
    # --pipeline-parallel-size (TP x PP is part of the object names); one value on every vllm host
    vllm_pipeline_parallel_size: int = Field(default=1, ge=1, le=64)
    # --kv-cache-dtype (auto: the model's dtype); sets KV bytes per token and object names;
    # one value fleet-wide
    vllm_kv_cache_dtype: Literal["auto", "fp8", "fp8_e4m3", "fp8_e5m2", "bfloat16",
                                 "float16"] = "auto"
    vllm_dtype: str = "auto"  # --dtype of weights and activations (auto: not passed, vLLM picks)
    # --block-size in tokens; unset: the pinned vLLM's default for the accelerator (compat.yaml)
    vllm_block_size: int | None = Field(default=None, ge=1, le=65536)
    # --max-model-len in tokens (unset: the model's); must be at least lmcache_chunk_size
    vllm_max_model_len: int | None = Field(default=None, ge=1, le=100_000_000)
    # host DRAM in GiB of each serving host: bounds the LMCache server's computed L1 (half
    # of it); unset: the L1 is not bounded (plan says so)
    vllm_host_memory_gb: float | None = Field(default=None, gt=0, le=1_048_576)
    # --gpu-memory-utilization: share of device memory vLLM may take; unset: vLLM's default
    vllm_gpu_memory_utilization: float | None = Field(default=None, gt=0, le=1)
    # rope scaling for longer contexts (e.g. yarn, factor);
    # passed as --rope-scaling or --hf-overrides per vLLM
    vllm_rope_scaling: dict[str, Any] | None = None
    # the first vLLM instance's public port (the serving front, HAProxy, listens there);
    # instance i listens on vllm_port + i
    vllm_port: int = Field(default=8000, ge=1, le=65535)
    # the first vLLM instance's port on 127.0.0.1, behind the serving front; instance i on
    # vllm_loopback_port + i (vLLM itself never listens on the host's addresses)
    vllm_loopback_port: int = Field(default=18000, ge=1, le=65535)
    # addresses or networks (CIDR) besides the monitoring group's hosts and loopback that
    # the serving front lets read vLLM's /metrics without the API key (an outside Prometheus)
    vllm_metrics_sources: list[str] = Field(default_factory=list)
    # accelerator devices per host (GPUs, Gaudi modules); unset: one instance on every device
    vllm_accelerator_count: int | None = Field(default=None, ge=1, le=1024)
    # vLLM instances per host, each with its own unit, port and device set; unset:
    # vllm_accelerator_count / (TP x PP), else 1
    vllm_instances: int | None = Field(default=None, ge=1, le=256)
    # PYTHONHASHSEED for vLLM and the LMCache server; seeds chunk hashes, so one value fleet-wide
    vllm_python_hash_seed: int = Field(default=67, ge=0, le=4294967295)
    # None: follows lmcache_topology (LMCacheConnectorV1 inprocess, LMCacheMPConnector server)
    vllm_kv_connector: str | None = None
    # kv_role of --kv-transfer-config: this vLLM produces KV, consumes it, or both
    vllm_kv_role: Literal["kv_both", "kv_producer", "kv_consumer"] = "kv_both"
    # fields merged into --kv-transfer-config (they win); only fields the pinned vLLM accepts
    vllm_kv_transfer_extra: dict[str, Any] = Field(default_factory=dict)
    # words appended to vLLM's argv after deploykit's flags (a secret's value there is refused)
    vllm_extra_args: list[str] = Field(default_factory=list)
    # variables added to vllm.env (0644) over deploykit's own; credentials there are refused
    vllm_extra_env: dict[str, str] = Field(default_factory=dict)
    # the virtual environment on the serving host that vLLM and LMCache are installed into
    vllm_venv: str = "/opt/vllm"
    vllm_user: str = "vllm"
    # serving hosts `up` restarts at a time (serving.yml serial), as the vllm group sets it
    vllm_serial: int = Field(default=1, ge=1, le=10_000)
    # read by nothing at present: no render, rule or role uses it
    vllm_concurrent_requests: int = Field(default=16, ge=1, le=1_000_000)
    # false: vLLM is installed out of band into vllm_venv; the serving role installs no vLLM
    vllm_install: bool = True
    # a controller directory of wheels (the site's wheelhouse) vLLM installs from instead of
    # PyPI; needed for ROCm and Gaudi3 builds (relative: to the inventory)
    vllm_wheel_dir: str = ""
    # where the serving role copies that wheelhouse on the host for the install; the whole
    # directory is deleted (as root) after every venv build, so it is held to the path rules
    vllm_wheel_staging_dir: str = "/var/cache/deploykit-wheels"
    vllm_health_timeout: int = Field(default=1800, ge=10, le=86400)
    vllm_served_model_name: str | None = None  # the name clients send; default: vllm_model
    # the OpenAI API's bearer key, written to a 0600 env file as VLLM_API_KEY (never in argv);
    # from the vault, else generated on the first `up` into the inventory's vault file
    vllm_api_key: SecretStr | None = None
    # a rotation under way (`deploykit secrets rotate vllm-api-key`): the key the clients
    # move to, accepted beside vllm_api_key until the rotation finishes (docs/day2.md)
    vllm_api_key_next: SecretStr | None = None
    # false: serve the OpenAI API without a key when none is set (anyone who reaches the
    # port may read and plant KV in the shared cache): an explicit opt-out `plan` warns about
    vllm_api_key_required: bool = True
    # vllm-gaudi: VLLM_BUCKETING_STRATEGY (exp, the plugin's default, prepares long-context
    # buckets itself); warm-up skipping is for development only
    vllm_gaudi_bucketing_strategy: Literal["exp", "lin", "pad"] = "exp"
    # gaudi3 hosts: VLLM_SKIP_WARMUP=true (skips vllm-gaudi's warm-up)
    vllm_gaudi_skip_warmup: bool = False
    # cpu hosts: vLLM's KV cache in GiB (VLLM_CPU_KVCACHE_SPACE; it lives in /dev/shm)
    vllm_cpu_kvcache_space: int = Field(default=1, ge=1, le=4096)
    # CUDA/HIP graph memory per device, GiB, as vLLM logs it at start ("CUDA graph memory
    # profiling ..."): the fit rule's graph reserve; unset: compat.yaml's per-layer estimate
    vllm_cuda_graph_gib: float | None = Field(default=None, ge=0, le=1024)
    vllm_enforce_eager: bool = False  # no torch.compile/graphs: starts in ~35 s on CPU, not ~150
    # seconds a stopping vLLM lets its in-flight requests finish (--shutdown-timeout, vLLM
    # 0.18+); 0: vLLM's default, abort them. The unit's TimeoutStopSec is this plus 60 s
    vllm_shutdown_timeout: int = Field(default=60, ge=0, le=3600)
    vllm_enable_prefix_caching: bool | None = None  # None: vLLM's default (on)
    # vLLM's KV events (--kv-events-config: ZMQ, topic kv@<addr>:<port>@<model>), which the
    # router's kvaware logic reads; None: on where the site has a `router` group
    vllm_kv_events: bool | None = None
    # instance i publishes its events on 127.0.0.1 at vllm_kv_events_loopback_port + i; the
    # serving front passes vllm_kv_events_port + i on to it for the router hosts only (the
    # events carry prompt token ids)
    vllm_kv_events_port: int = Field(default=5557, ge=1, le=65535)
    vllm_kv_events_loopback_port: int = Field(default=15557, ge=1, le=65535)
    # where a site has routers, who besides them, loopback and the monitoring hosts may send
    # requests to an instance's /v1 directly (addresses or CIDR networks): the controller
    # that runs `verify` and `bench`, an operator's network
    vllm_direct_sources: list[str] = Field(default_factory=list)

    # --- router: the `router` group runs vllm-router (PyPI, pinned by hash) behind a front
    # that checks the API key; every vLLM instance of the site is its backend, and the
    # routers answer together under one name (Consul + CoreDNS, as the S3 name) ------------
    # the vllm-router release; its lock (every wheel's sha256) ships with deploykit
    router_version: str = "0.1.17"
    # how a request picks its instance: prefixaware (the router's tree of what each instance
    # was sent), kvaware (vLLM's KV events: what each instance holds), session (a hash of
    # x-session-id or the request's `user`), roundrobin
    router_routing_logic: Literal["prefixaware", "kvaware", "session", "roundrobin"] = \
        "prefixaware"
    # the name clients use; unset: llm.<the S3 name's domain> (s3.example.com: llm.example.com)
    router_fqdn: str | None = None
    # the Consul service the routers register (CoreDNS answers router_fqdn with its set)
    router_service_name: str = "llm"
    # the router front's public port (HAProxy: checks the key, passes /v1, /health, /metrics)
    router_port: int = Field(default=8200, ge=1, le=65535)
    router_loopback_port: int = Field(default=18200, ge=1, le=65535)  # the router, 127.0.0.1
    router_metrics_port: int = Field(default=29000, ge=1, le=65535)  # its Prometheus, 127.0.0.1
    # seconds between the router's health checks of each backend; two failures take it out
    router_health_check_interval: int = Field(default=5, ge=1, le=3600)
    # the virtual environment vllm-router is installed into, and the user it runs as
    router_venv: str = "/opt/deploykit/router"
    router_user: str = "vllm-router"
    # a controller directory with the lock's wheels (air-gapped sites, the lab): the router
    # installs from it, offline, by the same hashes; empty: from PyPI
    router_wheel_dir: str = ""
    # words appended to the router's argv (e.g. --balance-abs-threshold 16)
    router_extra_args: list[str] = Field(default_factory=list)


    # --- monitoring: Prometheus targets, alert rules and a dashboard (render tree
    # _cluster/monitoring/); a `monitoring` group gets Prometheus itself -----------------
    # Prometheus's scrape and evaluation interval; the S3 log counter timer runs at 2x it (≤ 30s)
    monitoring_scrape_interval: str = Field(default="15s", pattern=_DURATION)
    # the cross-host tier's goal: vLLM's external (LMCache) hit ratio per model, and for how
    # long it may stay below before the alert fires
    monitoring_hit_ratio_target: float = Field(default=0.5, ge=0, le=1)
    # how long the hit ratio may stay below monitoring_hit_ratio_target before the alert fires
    monitoring_hit_ratio_for: str = Field(default="15m", pattern=_DURATION)
    # HAProxy's average response time of one gateway over its last 1024 requests (no
    # exporter here has an RGW percentile: see docs/monitoring.md)
    monitoring_rgw_latency_seconds: float = Field(default=1.0, gt=0, le=3600)
    # alert when an OSD's commit latency (the mgr's ceph_osd_commit_latency_ms) stays above
    # this for 5 minutes: RGW writes, and so LMCache stores, wait on it
    monitoring_ceph_osd_latency_ms: float = Field(default=100.0, gt=0, le=600_000)
    # alert when less than this share of a serving host's /dev/shm stays free for 5 minutes
    monitoring_shm_free_ratio: float = Field(default=0.1, gt=0, lt=1)
    # sites with routers: alert when one instance gets more than this share of a router's
    # requests (vllm-router's policy decisions; kvaware counts none, so it has no such alert)
    # while the router has two or more healthy instances and real traffic. Above 0.5: with
    # two instances an even split is 0.5
    monitoring_router_skew_ratio: float = Field(default=0.8, gt=0.5, lt=1)
    # how long that share may stay above monitoring_router_skew_ratio before the alert fires
    monitoring_router_skew_for: str = Field(default="30m", pattern=_DURATION)
    # `up` enables Ceph's mgr `prometheus` module and Prometheus scrapes it; false: neither
    monitoring_ceph_mgr_prometheus: bool = True
    # where Prometheus scrapes the mgr `prometheus` module (host:port): list every mgr host,
    # since only the active mgr serves data and a standby answers with an empty page (Ceph's
    # mgr/prometheus module.py StandbyModule), so the active one is scraped wherever it
    # moves; empty: every ceph_admin host on 9283 (the module's default port)
    monitoring_ceph_mgr_targets: list[str] = Field(default_factory=list)
    # serving hosts: /dev/shm and memory come from the node exporter (Debian's package,
    # installed by `up` when the site has a monitoring group)
    monitoring_node_exporter_install: bool = True
    # the node exporter's port on serving hosts (scraped by Prometheus)
    monitoring_node_exporter_port: int = Field(default=9100, ge=1, le=65535)
    monitoring_prometheus_port: int = Field(default=9090, ge=1, le=65535)
    # the blackbox exporter's port on the monitoring host (loopback); it probes CoreDNS's answers
    monitoring_blackbox_port: int = Field(default=9115, ge=1, le=65535)
    monitoring_alertmanager: bool = False
    # Alertmanager's port on the monitoring host (loopback), with monitoring_alertmanager: true
    monitoring_alertmanager_port: int = Field(default=9093, ge=1, le=65535)

    @model_validator(mode="before")
    @classmethod
    def _default_chunk_hash(cls, data: Any) -> Any:
        """lmcache_pre_caching_hash_algorithm unset: the pinned LMCache series' first
        (sha256_cbor; builtin on 0.3.x, whose keys cannot hold a digest)."""
        if not isinstance(data, dict) or data.get("lmcache_pre_caching_hash_algorithm") is not None:
            return data
        version = data.get("lmcache_version", cls.model_fields["lmcache_version"].default)
        try:
            hashes = compat.lmcache(str(version)).pre_caching_hashes
        except ValueError:  # unsupported version: versions_supported reports it
            return data
        return {**data, "lmcache_pre_caching_hash_algorithm": hashes[0]}

    @model_validator(mode="before")
    @classmethod
    def _default_topology(cls, data: Any) -> Any:
        """vllm_version unset: compat.yaml's default for the accelerator (CUDA's is the vLLM
        whose torch PyPI's LMCache was built against); lmcache_topology unset: the pinned
        LMCache series' default for the accelerator."""
        if isinstance(data, dict) and data.get("vllm_version") is None and \
                isinstance(data.get("vllm_accelerator"), str):
            default_version = compat.default_vllm_version(data["vllm_accelerator"])
            if default_version is not None:
                data = {**data, "vllm_version": default_version}
        if not isinstance(data, dict) or data.get("lmcache_topology") is not None:
            return data
        accelerator = data.get("vllm_accelerator")
        version = data.get("lmcache_version", cls.model_fields["lmcache_version"].default)
        if not isinstance(accelerator, str) or not isinstance(version, str):
            return data
        vllm_version = data.get("vllm_version", cls.model_fields["vllm_version"].default)
        try:
            default = (compat.lmcache(version).default_topology or {}).get(accelerator)
            vllm = compat.vllm(str(vllm_version))
        except ValueError:  # unsupported version: versions_supported reports it
            return data
        if default == "server" and "LMCacheMPConnector" not in vllm.lmcache_connectors:
            default = "inprocess"  # a vLLM without the MP connector (0.10)
        if default == "server" and data.get("lmcache_mode") == "nixl":
            default = "inprocess"  # the server's NIXL adapter shares no keys (rules_accelerators)
        return {**data, "lmcache_topology": default} if default else data

    # --- value checks: what is pasted into config text is typed, so it cannot break the file ---
    @field_validator("*", mode="before")
    @classmethod
    def _no_lax_coercion(cls, value: Any, info: ValidationInfo) -> Any:
        # what pydantic's lax mode would coerce silently (`yes` as a port, "off" as true,
        # !!binary as text) or what no setting can hold (config/edge_values.py)
        if info.field_name is not None:
            kind = _KINDS.get(info.field_name)
            if kind is None:
                kind = _KINDS[info.field_name] = kind_of(
                    cls.model_fields[info.field_name].annotation)
            problem = edge_value_problem(value, kind)
            if problem:
                raise ValueError(problem)
        return value

    @field_validator("*")
    @classmethod
    def _no_control_characters(cls, value: Any) -> Any:
        problem = control_character_problem(value)
        if problem:
            raise ValueError(f"{problem}|remove it: every setting is written into line-based "
                             "files (units, env files, configs) where it would start a line")
        return value

    @field_validator("consul_service_name", "consul_datacenter", "router_service_name")
    @classmethod
    def _dns_label(cls, value: str) -> str:
        # both become DNS labels (<service>.service.<dc>.consul) and names in Consul's
        # HCL/JSON policy text: a quote or brace there would add rules
        if not _LABEL.match(value):
            raise ValueError(f"{value[:40]!r} is not a DNS label|letters, digits and '-', "
                             "at most 63, not starting or ending with '-'")
        return value

    @field_validator("ceph_rgw_realm", "ceph_rgw_zonegroup", "ceph_rgw_zone")
    @classmethod
    def _rgw_entity(cls, value: str | None) -> str | None:
        # radosgw-admin / mgr command arguments and YAML spec values
        if value is not None and not _ACCOUNT.match(value):
            raise ValueError(f"{value[:40]!r} is not a realm, zonegroup or zone name|letters, "
                             "digits, '.', '_' and '-', at most 64")
        return value

    @field_validator("ceph_rgw_s3_user", "ceph_rgw_concentrator_monitor_user")
    @classmethod
    def _account_name(cls, value: str) -> str:
        # an RGW uid (radosgw-admin argv) and an HAProxy userlist name (config text)
        if not _ACCOUNT.match(value):
            raise ValueError(f"{value[:40]!r} is not a plain account name|letters, digits, "
                             "'.', '_' and '-', at most 64")
        return value

    @field_validator("vllm_user", "router_user")
    @classmethod
    def _user_name(cls, value: str) -> str:
        if not _USER_NAME.match(value):
            raise ValueError(f"{value[:40]!r} is not a portable user name|lower-case letters, "
                             "digits, '_' and '-', starting with a letter or '_', at most 32")
        return value

    @field_validator("vllm_extra_env")
    @classmethod
    def _env_names(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            if not _ENV_NAME.match(name):
                raise ValueError(f"{name[:40]!r} is not an environment variable name|letters, "
                                 "digits and '_', not starting with a digit")
        return value

    @field_validator("lmcache_config_dir", "vllm_venv", "consul_data_dir", "lmcache_disk_path",
                     "deploykit_ceph_conf", "vllm_models_dir", "lmcache_nixl_ca_bundle",
                     "deploykit_common_record_path", "vllm_wheel_staging_dir", "router_venv")
    @classmethod
    def _paths_absolute(cls, value: str) -> str:
        return _absolute_path(value)

    @field_validator(*FREE_STRINGS)
    @classmethod
    def _free_string(cls, value: str | None, info: ValidationInfo) -> str | None:
        # names pasted into argv, unit names, ceph.conf (INI: `;` and `#` start comments),
        # YAML specs and Prometheus labels: each its own character set (FREE_STRINGS)
        pattern, what, allowed = FREE_STRINGS[str(info.field_name)]
        if value is not None and not (value.startswith("/") and info.field_name ==
                                      "vllm_model") and not pattern.fullmatch(value):
            raise ValueError(f"{value[:60]!r} is not {what}|use {allowed}")
        return value

    @field_validator(*RELEASE_VERSIONS, *PYTHON_VERSIONS)
    @classmethod
    def _version(cls, value: str, info: ValidationInfo) -> str:
        release = info.field_name in RELEASE_VERSIONS
        if not (_RELEASE if release else _PEP440).fullmatch(value):
            example = cls.model_fields[str(info.field_name)].default
            raise ValueError(f"{value[:40]!r} is not an exact release version|pin one release "
                             f"({'X.Y.Z' if release else 'a PEP 440 version'}, e.g. "
                             f"{example}): never latest, a range, a URL or spaces")
        return value

    @field_validator("vllm_model")
    @classmethod
    def _model(cls, value: str) -> str:
        return _absolute_path(value) if value.startswith("/") else value

    @field_validator(*UNPRIVILEGED_PORTS)
    @classmethod
    def _unprivileged_port(cls, value: int, info: ValidationInfo) -> int:
        # these services run as their own user without CAP_NET_BIND_SERVICE (radosgw drops
        # to ceph before its frontends bind; consul, vllm and the LMCache server have User=)
        if value < 1024:
            service = UNPRIVILEGED_PORTS[str(info.field_name)]
            raise ValueError(f"port {value} is privileged, but {service} runs as an "
                             "unprivileged user and could not bind it|use a port from 1024 up")
        return value

    @field_validator("vllm_metrics_sources", "vllm_direct_sources")
    @classmethod
    def _metrics_sources(cls, value: list[str]) -> list[str]:
        # each lands in the serving front's `src` ACL (render/serving_front.py) as written
        for entry in value:
            try:
                ipaddress.ip_network(entry, strict=False)
            except ValueError:
                raise ValueError(f"{entry[:60]!r} is not an address or network|give IPv4/IPv6 "
                                 "addresses or CIDR networks, e.g. 10.0.5.7 or 10.0.5.0/24"
                                 ) from None
        return value

    @field_validator("deploykit_s3_fqdn", "router_fqdn")
    @classmethod
    def _fqdn(cls, value: str | None) -> str | None:
        if value is None:
            return value
        why = dns_name_problem(value)
        if why:
            raise ValueError(f"{why}|use a name such as s3.example.com")
        return value

    @field_validator("deploykit_s3_region")
    @classmethod
    def _region(cls, value: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}", value):
            raise ValueError(f"{value!r} is not an S3 region (LMCache turns the remote tier off "
                             "without one)|use the RGW zonegroup name, e.g. default")
        return value

    @field_validator("coredns_upstream")
    @classmethod
    def _upstreams(cls, value: list[str]) -> list[str]:
        for entry in value:
            if entry.startswith("/"):
                _absolute_path(entry)
                continue
            addr, port = entry, ""
            if entry.startswith("[") and "]:" in entry:  # [v6]:port
                addr, port = entry[1:].split("]:", 1)
            elif entry.count(":") == 1:
                addr, port = entry.split(":")
            try:
                ipaddress.ip_address(addr)
                if port and not (port.isdigit() and 0 < int(port) < 65536):
                    raise ValueError(port)
            except ValueError:
                raise ValueError(f"{entry!r} is not an upstream resolver|give an IPv4/IPv6 "
                                 "address (optionally :port) or a resolv.conf path") from None
        return value

    @field_validator("coredns_allowed_networks")
    @classmethod
    def _coredns_networks(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return None
        out = []
        for entry in value:
            try:  # an address is its own /32 or /128; host bits are dropped, as CoreDNS does
                out.append(str(ipaddress.ip_network(entry.strip(), strict=False)))
            except ValueError:
                raise ValueError(f"{entry!r} is not a network|give CIDRs such as "
                                 "10.0.0.0/24 or 2001:db8::/64, or addresses") from None
        return out

    @field_validator("coredns_bind")
    @classmethod
    def _coredns_bind(cls, value: list[str] | None) -> list[str] | None:
        for entry in value or []:
            try:
                ipaddress.ip_address(entry)
            except ValueError:
                if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_.-]{0,14}", entry):
                    raise ValueError(f"{entry!r} is neither an address nor an interface "
                                     "name|give IP addresses or interface names such as "
                                     "eth0") from None
        return value

    @field_validator("consul_http_address")
    @classmethod
    def _ip_address(cls, value: str) -> str:
        try:
            ipaddress.ip_address(value)
        except ValueError:
            raise ValueError(f"{value[:40]!r} is not an IP address|give 127.0.0.1 (the "
                             "default), the host's own address or 0.0.0.0") from None
        return value

    @field_validator("monitoring_ceph_mgr_targets")
    @classmethod
    def _scrape_targets(cls, value: list[str]) -> list[str]:
        for entry in value:
            host, _, port = entry.rpartition(":")
            if not (port.isdigit() and 0 < int(port) < 65536) or \
                    (dns_name_problem(host, 1) and not _is_ip(host.strip("[]"))):
                raise ValueError(f"{entry[:60]!r} is not a scrape target|give host:port, "
                                 "e.g. 10.0.0.5:9283 or mgr1.example.com:9283")
        return value

    @field_validator("ceph_rgw_networks")
    @classmethod
    def _networks(cls, value: list[str]) -> list[str]:
        for entry in value:
            try:
                if "/" not in entry:
                    raise ValueError(entry)
                ipaddress.ip_network(entry, strict=False)
            except ValueError:
                raise ValueError(f"{entry!r} is not a network in CIDR notation|use e.g. "
                                 "10.0.0.0/24") from None
        return value

    @property
    def team(self) -> Team | None:
        """The team whose identity and bucket this host's LMCache uses: lmcache_team, else
        the one team listing vllm_model; None when none does (or lmcache_team names no team:
        rules_teams refuses that). A host that names its own sharing group
        (lmcache_s3_bucket) and no team is in none: how a model's hosts stay out of the team
        that lists the model (Gaudi3 in-process beside a team's GPUs on the server topology)."""
        if self.lmcache_team is not None:
            return next((t for t in self.teams if t.name == self.lmcache_team), None)
        if self.lmcache_s3_bucket is not None:
            return None
        listing = [t for t in self.teams if self.vllm_model in t.models]
        return listing[0] if len(listing) == 1 else None

    @property
    def cache_bucket(self) -> str:
        """The bucket this host's LMCache reads and writes: its sharing group."""
        team = self.team
        if team is not None:
            return team_bucket(team, self.deploykit_s3_bucket)
        return self.lmcache_s3_bucket or self.deploykit_s3_bucket

    @property
    def lmcache_server(self) -> bool:
        """LMCache runs as its own `lmcache server` unit beside vLLM (lmcache_topology:
        server), not inside it. The one place the topology string is compared: config-level
        code reads this, everything above reads plan/serving.py."""
        return self.lmcache_topology == "server"

    @property
    def kv_connector(self) -> str:
        if self.vllm_kv_connector:
            return self.vllm_kv_connector
        return "LMCacheMPConnector" if self.lmcache_server else "LMCacheConnectorV1"

    @property
    def vllm_uses_api_key(self) -> bool:
        """vLLM serves behind VLLM_API_KEY: a key is set, or required (then generated)."""
        return self.vllm_api_key is not None or self.vllm_api_key_required

    @property
    def model_is_local(self) -> bool:
        """vllm_model names a directory on the controller that the serving role stages."""
        return self.vllm_model.startswith("/")

    @property
    def model_path_on_host(self) -> str:
        if not self.model_is_local:
            return self.vllm_model
        return f"{self.vllm_models_dir}/{posixpath.basename(self.vllm_model.rstrip('/'))}"

    @property
    def served_model_name(self) -> str:
        """What clients send as `model`: a local model is served by its directory's name."""
        if self.vllm_served_model_name:
            return self.vllm_served_model_name
        return posixpath.basename(self.vllm_model.rstrip("/")) if self.model_is_local \
            else self.vllm_model


def known_keys() -> set[str]:
    return set(HostConfig.model_fields)


def team_bucket(team: Team, site_bucket: str) -> str:
    """A team's bucket: its own setting, else <site bucket>-<team>."""
    return team.bucket or f"{site_bucket}-{team.name}"
