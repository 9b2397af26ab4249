"""vLLM instances per serving host: each its own unit, port and device set.

An 8-GPU host at TP 2 runs four engines, not one: `vllm_accelerator_count / (TP x PP)`
instances by default (`vllm_instances` overrides). Instance 0 keeps the names a one-engine
host always had (`vllm.service`, `vllm.env`, `vllm_port`), so an existing host upgrades in
place; instance i >= 1 is `vllm-<i>` on `vllm_port + i`. Each vLLM listens on 127.0.0.1 at
`vllm_loopback_port + i`; the serving front (render/serving_front.py) listens on the public
port and forwards only what is safe to expose.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from deploy_kit.config.models import HostConfig
from deploy_kit.config.site import Host

# The variable each runtime reads to pick its devices (CUDA, ROCm/HIP, Habana's module ids).
# CPU hosts have none: their instances share the cores.
DEVICE_ENV = {"cuda": "CUDA_VISIBLE_DEVICES", "rocm": "HIP_VISIBLE_DEVICES",
              "gaudi3": "HABANA_VISIBLE_MODULES"}


def workers(c: HostConfig) -> int:
    """Devices one instance uses: TP x PP."""
    return c.vllm_tensor_parallel_size * c.vllm_pipeline_parallel_size


def instance_count(c: HostConfig) -> int:
    if c.vllm_instances is not None:
        return c.vllm_instances
    if c.vllm_accelerator_count is not None and c.vllm_accelerator != "cpu":
        return max(1, c.vllm_accelerator_count // workers(c))
    return 1


@dataclass(frozen=True)
class Instance:
    host: str
    index: int
    count: int  # instances on the host
    port: int  # public: the serving front's, what clients, Prometheus and verify use
    devices: tuple[int, ...]  # empty: every device the host has (one instance, or cpu)
    device_env: str | None  # the variable that carries `devices`
    loopback_port: int = 0  # vLLM's own, on 127.0.0.1 (the front forwards to it)

    @property
    def unit(self) -> str:
        return "vllm" if self.index == 0 else f"vllm-{self.index}"

    @property
    def name(self) -> str:
        """How verify, plan and bench name it: the host alone when it runs one engine."""
        return self.host if self.count == 1 else f"{self.host}/{self.index}"

    @property
    def env(self) -> dict[str, str]:
        if not self.devices or self.device_env is None:
            return {}
        return {self.device_env: ",".join(str(d) for d in self.devices)}


def instances(host_name: str, c: HostConfig) -> list[Instance]:
    count = instance_count(c)
    per = workers(c)
    device_env = DEVICE_ENV.get(c.vllm_accelerator or "cuda")
    # a device set only where devices are counted and split: one engine on an uncounted
    # host sees what the runtime shows it, as before
    split = device_env is not None and c.vllm_accelerator_count is not None and \
        (count > 1 or c.vllm_accelerator_count > per)
    return [Instance(host_name, i, count, c.vllm_port + i,
                     tuple(range(i * per, (i + 1) * per)) if split else (), device_env,
                     c.vllm_loopback_port + i)
            for i in range(count)]


def endpoints(host: Host) -> list[Host]:
    """The host as its instances' HTTP endpoints, for what talks to vLLM over HTTP (verify's
    cache and cross-host probes, bench, monitoring): one view per instance, named after it
    and carrying its port as vllm_port. What runs on the host over SSH keeps `host` itself.
    A one-engine host is its own endpoint, unchanged."""
    found = instances(host.name, host.config)
    if len(found) == 1:
        return [host]
    return [replace(host, name=i.name,
                    config=host.config.model_copy(update={"vllm_port": i.port}))
            for i in found]


def host_of(endpoint_name: str) -> str:
    """The inventory host an endpoint name belongs to (`lab3/1` -> `lab3`)."""
    return endpoint_name.split("/", 1)[0]
