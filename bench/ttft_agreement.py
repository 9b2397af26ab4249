"""Does `bench ttft` agree with an independent client? On the lab (up and converged):
`deploykit bench ttft` at 4,096 tokens with REPEATS repeats, then LMCache's `long_doc_qa`
shape through the OpenAI client (bench/long_doc_qa_client.py, run on lab3 with the vLLM
venv's Python: warm on lab3, query lab4). Prints both other-host medians and their ratio
(target: within 1.5x). Only the lab's own addresses are contacted.

  python bench/ttft_agreement.py [REPEATS] [DOCS]      (default 3 and 5)
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LAB_KEY = "/var/lib/deploykit-lab/ssh/id_ed25519"
SSH = ["-i", LAB_KEY, "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
       "-o", "LogLevel=ERROR"]
WARM, QUERY = "10.99.0.13", "10.99.0.14"  # lab3, lab4
TOKENS = 4096


def api_key() -> str:
    from deploy_kit.ops.secrets_store import with_stored
    from deploy_kit.ops.site import open_site
    from deploy_kit.transport.openai import api_key as key_of

    site = with_stored(open_site(str(REPO / "inventory" / "lab"), None))
    host = next(h for h in site.hosts.values() if h.address == QUERY)
    return key_of(host) or ""


def independent(docs: int) -> dict:
    client = REPO / "bench" / "long_doc_qa_client.py"
    subprocess.run(["scp", "-q", *SSH, str(client), f"root@{WARM}:/tmp/"], check=True)
    venv = "/opt/vllm/bin/python"
    done = subprocess.run(
        ["ssh", *SSH, f"root@{WARM}",
         f"IFS= read -r VLLM_API_KEY; export VLLM_API_KEY; exec {venv} "
         f"/tmp/long_doc_qa_client.py http://{WARM}:8000 http://{QUERY}:8000 {TOKENS} {docs}"],
        input=api_key() + "\n", capture_output=True, text=True, check=True, timeout=1800)
    result: dict = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    docs = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    with tempfile.TemporaryDirectory() as out:
        subprocess.run([sys.executable, "-m", "deploy_kit", "bench", "ttft", "-i", "lab",
                        "--lengths", str(TOKENS), "--repeats", str(repeats), "--out", out],
                       cwd=REPO, check=True, capture_output=True)
        doc = json.loads((Path(out) / "ttft.json").read_text())
    bench = {s["case"]: s for s in doc["summary"]}
    client = independent(docs)
    ours = bench["remote_hit_other_host"]["ttft_s"]
    theirs = client["other_host_hit_median_s"]
    print(json.dumps({
        "context_tokens": TOKENS, "bench_repeats": repeats, "client_docs": docs,
        "bench_other_host_hit_s": {k: bench["remote_hit_other_host"][k]
                                   for k in ("ttft_s", "ttft_min_s", "ttft_max_s")},
        "bench_cold_s": bench["cold"]["ttft_s"],
        "client_other_host_hit_median_s": theirs,
        "client_cold_median_s": client["cold_median_s"],
        "client_prompt_tokens": client.get("prompt_tokens"),
        "ratio_bench_vs_client": round(ours / theirs, 2), "target_ratio": 1.5}, indent=2))


if __name__ == "__main__":
    main()
