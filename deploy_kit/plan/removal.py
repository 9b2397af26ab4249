"""`deploykit remove`: which hosts it may take out of a site, and what it does on each.

Pure: reads the Site only. What a removal would break is refused here, before any host is
contacted; what the site looks like at run time (which gateways pass in Consul) is checked
again by playbooks/remove.yml on each host, just before that host leaves DNS."""

from __future__ import annotations

from dataclasses import dataclass

from deploy_kit.config import names
from deploy_kit.config.site import Site
from deploy_kit.core.errors import DeployKitError
from deploy_kit.core.exit_codes import ExitCode


class RemoveRefused(DeployKitError):
    """The hosts named cannot be removed as asked (exit 2: the command line is at fault)."""

    exit_code = ExitCode.USAGE


@dataclass(frozen=True)
class Refusal:
    message: str
    hint: str
    forcible: bool  # --force may override it (the site keeps serving, with less margin)


def unknown_hosts(site: Site, names: list[str]) -> list[str]:
    return [n for n in names if n not in site.hosts]


def check_hosts(site: Site, names: list[str]) -> tuple[str, ...]:
    """The named hosts, in order, once each; a name not in the inventory is refused."""
    if not names:
        raise RemoveRefused("name at least one host to remove",
                            hint="deploykit remove -i SITE HOST [HOST...]")
    unknown = unknown_hosts(site, names)
    if unknown:
        raise RemoveRefused(
            f"{', '.join(unknown)}: not a host of {site.inventory_source}",
            hint="remove works on hosts still in the inventory (remove first, then delete "
                 f"them from the inventory); its hosts: {', '.join(sorted(site.hosts))}")
    return tuple(dict.fromkeys(names))


def refusals(site: Site, names: tuple[str, ...]) -> list[Refusal]:
    """What removing `names` would break, from the inventory alone."""
    gone = set(names)
    found: list[Refusal] = []
    consul = site.settings.deploykit_dns_mode == "consul"

    def left(group: str) -> list[str]:
        return [h.name for h in site.group(group) if h.name not in gone]

    def named(group: str) -> list[str]:
        return [h.name for h in site.group(group) if h.name in gone]

    if named("rgw") and not left("rgw"):
        found.append(Refusal(
            f"removing {', '.join(named('rgw'))} leaves no gateway: the S3 name "
            f"{site.settings.deploykit_s3_fqdn} would lose every address", "add a gateway "
            "host and `deploykit up` it first, or take the whole site down with "
            "`deploykit down`", forcible=False))
    if named("dns") and not left("dns"):
        found.append(Refusal(
            f"removing {', '.join(named('dns'))} leaves no DNS server: no host could resolve "
            "the S3 name", "add a host to the dns group and `deploykit up` it first",
            forcible=False))
    servers = [h.name for h in site.group("consul_servers")]
    if consul and named("consul_servers"):
        if not left("consul_servers"):
            found.append(Refusal(
                f"removing {', '.join(named('consul_servers'))} leaves no Consul server: the "
                "catalog that CoreDNS answers from would go", "add a Consul server and "
                "`deploykit up` it first", forcible=False))
        elif len(left("consul_servers")) < len(servers) // 2 + 1:
            found.append(Refusal(
                f"removing {', '.join(named('consul_servers'))} leaves "
                f"{len(left('consul_servers'))} of {len(servers)} Consul servers, fewer than "
                "a majority: one more failure during the removal loses quorum",
                f"remove at most {(len(servers) - 1) // 2} server(s) per run (or --force)",
                forcible=True))
    if not consul and named("rgw"):
        found.append(Refusal(
            f"{', '.join(named('rgw'))}: with deploykit_dns_mode static every zone keeps "
            "naming the gateway until the inventory drops it, so clients would meet a "
            "stopped concentrator", "delete the host from the rgw group and run "
            "`deploykit up` (the zones drop it), or --force", forcible=True))
    return found


def refuse(site: Site, names: tuple[str, ...], force: bool) -> list[Refusal]:
    """Raise the first refusal --force does not lift; return those it lifted (to print)."""
    found = refusals(site, names)
    for refusal in found:
        if not (force and refusal.forcible):
            raise RemoveRefused(refusal.message, hint=refusal.hint
                                + ("" if refusal.forcible else "; --force does not lift this"))
    return found


def steps(site: Site, name: str, purge: bool) -> list[str]:
    """What remove does on one host, in order (the confirmation and --check show it)."""
    host = site.hosts[name]
    groups = host.groups
    consul = site.settings.deploykit_dns_mode == "consul"
    done: list[str] = []
    if "rgw" in groups:
        if consul:
            done.append("take it out of DNS (Consul maintenance on its s3 service), wait "
                        "until no CoreDNS names it, then the DNS TTL")
        done.append("drain each gateway in HAProxy (open requests finish), then stop and "
                    "disable the gateways and the concentrator")
    if "dns" in groups:
        done.append("stop and disable CoreDNS")
    if "router" in groups:
        done.append("take it out of the routers' name (its Consul agent leaves), then stop "
                    "and disable vllm-router and its front")
    if consul and groups & names.CONSUL_AGENT_GROUPS:
        role = "server: the raft peers drop it" if "consul_servers" in groups else "agent"
        done.append(f"leave Consul gracefully ({role}), deregistered from the catalog; "
                    "stop and disable the agent")
    if "vllm" in groups:
        done.append("stop and disable its vLLM instances and LMCache server")
    if "monitoring" in groups:
        done.append("stop and disable Prometheus, Alertmanager and the blackbox exporter")
    done.append("forget its converge record (the next `up` converges it in full)")
    if purge:
        done.append("delete what `down` deletes there: configuration, unit files, keyrings, "
                    "the CoreDNS binary, Consul's data, the gateways' cephx keys")
    else:
        done.append("keep its files and data (--purge-data deletes what `down` deletes)")
    return done
