"""bench/gpu-prefill.py on a CPU with a tiny geometry, on a serving host
with the serving venv's PyTorch (no vLLM imported, nothing fetched): it times sampled
layers, scales them to the model's depth and reports TFLOPS the planner can use."""

from __future__ import annotations

import json

import pytest

from tests.conftest import REPO
from tests.lab.conftest import Lab

pytestmark = pytest.mark.lab


def test_calibration_runs_on_cpu_with_a_tiny_geometry(converged: Lab) -> None:
    host = "10.99.0.13"  # lab3
    script = (REPO / "bench" / "gpu-prefill.py").read_text()
    converged.ssh(host, "cat > /tmp/gpu-prefill.py", stdin=script)
    converged.ssh(host, "/opt/vllm/bin/python /tmp/gpu-prefill.py --device cpu --dtype fp32 "
                        "--layers 8 --sample-layers 2 --hidden 256 --heads 8 --kv-heads 2 "
                        "--head-dim 32 --intermediate 512 --tokens 512 --repeats 3 "
                        "--budget-s 120 --out /tmp/gpu-prefill.json > /dev/null")
    result = json.loads(converged.ssh(host, "cat /tmp/gpu-prefill.json"))
    assert result["device"] == "cpu" and result["h2d_gbps"] is None
    assert result["prefill_s_full_model"] == min(result["sample_prefill_s"]) / 2 * 8
    assert result["vllm_prefill_tflops"] > 0 and result["seconds"] < 120
    assert result["flops"] == pytest.approx(result["vllm_prefill_tflops"] * 1e12
                                            * result["prefill_s_full_model"])
