"""`deploykit.kvcache.cephadm_export`: a cephadm service spec in the shape `ceph orch ls
--export` prints (deploy_kit/render/cephadm_spec.py), so the ceph_rgw role compares what
cephadm runs with what deploykit rendered, not two layouts of one spec."""

from __future__ import annotations

from typing import Any

from deploy_kit.render.cephadm_spec import export_shape


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"cephadm_export": export_shape}
