"""A cephadm service spec in the shape `ceph orch ls --export` gives it back (pure).

cephadm stores a spec as ServiceSpec and exports `ServiceSpec.to_json()`: service_type,
service_id, service_name, placement, unmanaged, networks, extra_container_args,
extra_entrypoint_args and custom_configs at the top level; every other attribute, `config`
included, sorted under `spec:`, and any empty or false value left out (ceph/ceph
src/python-common/ceph/deployment/service_spec.py `ServiceSpec.to_json`, the same at
v16.2.15 and at fade588; PlacementSpec.to_json the same way for placement). `from_json`
takes both layouts ("old style" fields at the top level), so a spec written any other way
is applied fine but never compares equal to its export: deploykit renders this shape, and
the role compares both sides after this normalisation (roles/ceph_rgw/tasks/cephadm.yml).
tests/unit/test_cephadm_spec.py checks it against fixtures from Ceph's own code.
"""

from __future__ import annotations

from typing import Any

# ServiceSpec.to_json's top-level keys, in its order
TOP_LEVEL = ("service_type", "service_id", "service_name", "placement", "unmanaged",
             "networks", "extra_container_args", "extra_entrypoint_args", "custom_configs")
# PlacementSpec.to_json's keys, in its order
PLACEMENT = ("label", "hosts", "count", "count_per_host", "host_pattern")
# from_json drops these (ServiceDescription.to_json's status); never part of the spec
DROPPED = ("status",)


def _host(entry: Any) -> Any:
    """HostPlacementSpec.to_json: `host[:network][=name]`."""
    if isinstance(entry, dict):
        text = str(entry.get("hostname", ""))
        if entry.get("network"):
            text += f":{entry['network']}"
        if entry.get("name"):
            text += f"={entry['name']}"
        return text
    return entry


def _placement(placement: Any) -> dict[str, Any]:
    if not isinstance(placement, dict):
        return {}
    out = {k: placement[k] for k in PLACEMENT if placement.get(k)}
    if "hosts" in out:
        out["hosts"] = [_host(h) for h in out["hosts"] if h]
    return out


def export_shape(doc: Any) -> Any:
    """`doc` as cephadm exports it; anything that is not a mapping is returned as it is
    (an absent service reads as None and compares unequal)."""
    if not isinstance(doc, dict):
        return doc
    service_type = doc.get("service_type") or str(doc.get("service_name", "")).split(".")[0]
    service_id = doc.get("service_id") or (
        str(doc["service_name"]).split(".", 1)[1]
        if "." in str(doc.get("service_name", "")) else None)
    out: dict[str, Any] = {"service_type": service_type}
    if service_id:
        out["service_id"] = service_id
    out["service_name"] = f"{service_type}.{service_id}" if service_id else service_type
    placement = _placement(doc.get("placement"))
    if placement:
        out["placement"] = placement
    networks = doc.get("networks")
    if isinstance(networks, str):  # ServiceSpec.normalize_json
        networks = [networks]
    for key, value in (("unmanaged", doc.get("unmanaged")), ("networks", networks),
                       *((k, doc.get(k)) for k in TOP_LEVEL[6:])):
        if value:
            out[key] = value
    spec = {k: v for k, v in doc.items() if k not in TOP_LEVEL and k not in ("spec", *DROPPED)}
    spec.update(doc.get("spec") or {})
    if isinstance(spec.get("config"), dict):  # ServiceSpec.__init__: spaces become `_`
        spec["config"] = {str(k).replace(" ", "_"): v for k, v in spec["config"].items()}
    kept = {k: spec[k] for k in sorted(spec) if spec[k]}
    if kept:
        out["spec"] = kept
    return out
