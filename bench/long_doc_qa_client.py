"""An independent TTFT client in the shape of LMCache's `long_doc_qa` recipe
(LMCache benchmarks/long_doc_qa: a warm-up round sends every document once, a query round
sends them again and times the first streamed token), through the OpenAI client vLLM
itself ships, so nothing of deploykit's own HTTP code is in the measurement.

Runs on a serving host with the vLLM venv's Python (it has `openai`): documents are warmed
on WARM_URL (whose LMCache stores them in the bucket) and queried on QUERY_URL, a host that
never saw them, so its hits come from the remote tier. Prints one JSON document.

  python long_doc_qa_client.py WARM_URL QUERY_URL DOC_TOKENS N_DOCS   (API key: $VLLM_API_KEY)
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
import uuid

from openai import OpenAI


def ttft(client: OpenAI, model: str, prompt: str) -> float:
    start = time.perf_counter()
    stream = client.completions.create(model=model, prompt=prompt, max_tokens=8,
                                       temperature=0, stream=True)
    first = None
    for _chunk in stream:
        if first is None:
            first = time.perf_counter() - start
    return first if first is not None else float("nan")


def main() -> None:
    warm_url, query_url, doc_tokens, n_docs = sys.argv[1], sys.argv[2], int(sys.argv[3]), \
        int(sys.argv[4])
    key = os.environ.get("VLLM_API_KEY") or "none"
    warm = OpenAI(base_url=f"{warm_url}/v1", api_key=key, timeout=600)
    query = OpenAI(base_url=f"{query_url}/v1", api_key=key, timeout=600)
    model = query.models.list().data[0].id
    run = uuid.uuid4().hex[:8]
    # long_doc_qa's documents: a distinct head, then one repeated word (about a token each)
    docs = [f"{run} document {i}: " + "hi " * doc_tokens for i in range(n_docs)]
    cold = [ttft(query, model, f"{run} control {i}: " + "hi " * doc_tokens)
            for i in range(n_docs)]
    for doc in docs:  # the warm-up round, on the other host
        ttft(warm, model, doc)
    time.sleep(5)  # LMCache writes the bucket asynchronously
    hits = [ttft(query, model, doc) for doc in docs]
    print(json.dumps({"doc_tokens": doc_tokens, "docs": n_docs, "model": model,
                      "cold_s": cold, "other_host_hit_s": hits,
                      "cold_median_s": statistics.median(cold),
                      "other_host_hit_median_s": statistics.median(hits)}))


if __name__ == "__main__":
    main()
