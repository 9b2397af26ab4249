"""Runs in the CPU stack's venv with the pinned NIXL wheels' contents on PYTHONPATH (nixl, the
meta package LMCache imports as `nixl._api`, and nixl_cu13, which it loads for torch's CUDA
13): NIXL's own answer to which plugins exist and which memory types each registers.
stdin: {"backends": [...]}; stdout: one JSON line."""

from __future__ import annotations

import json
import sys

from nixl._api import nixl_agent, nixl_agent_config


def main() -> None:
    backends = json.load(sys.stdin)["backends"]
    agent = nixl_agent("deploykit-upstream-probe", nixl_agent_config(backends=[]))
    plugins = agent.get_plugin_list()
    print(json.dumps({"module": nixl_agent.__module__, "plugins": plugins,
                      "mem_types": {b: agent.get_plugin_mem_types(b) for b in backends
                                    if b in plugins}}))


if __name__ == "__main__":
    main()
