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
import urllib.request
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


def tokens(url: str, key: str, model: str, text: str) -> int:
    """vLLM's own /tokenize (the served model's tokenizer)."""
    request = urllib.request.Request(
        f"{url}/tokenize", data=json.dumps({"model": model, "prompt": text}).encode(),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {key}"})
    with urllib.request.urlopen(request, timeout=60) as answer:
        count: int = json.loads(answer.read())["count"]
    return count


def words_for(url: str, key: str, model: str, target: int, head: str) -> int:
    """How many "hi " after `head` make `target` tokens (at most)."""
    base = tokens(url, key, model, head)
    per_100 = tokens(url, key, model, head + "hi " * 100) - base
    words = max(1, (target - base) * 100 // per_100)
    while words > 1 and tokens(url, key, model, head + "hi " * words) > target:
        words -= 1
    return words


def exact(url: str, key: str, model: str, text: str, target: int) -> str:
    """`text` with fillers appended up to `target` tokens where the tokenizer allows."""
    count = tokens(url, key, model, text)
    for filler in (" .", ".", "!"):
        while count < target:
            longer = text + filler
            more = tokens(url, key, model, longer)
            if more > target:
                break
            text, count = longer, more
    return text


def main() -> None:
    warm_url, query_url, doc_tokens, n_docs = sys.argv[1], sys.argv[2], int(sys.argv[3]), \
        int(sys.argv[4])
    key = os.environ.get("VLLM_API_KEY") or "none"
    warm = OpenAI(base_url=f"{warm_url}/v1", api_key=key, timeout=600)
    query = OpenAI(base_url=f"{query_url}/v1", api_key=key, timeout=600)
    model = query.models.list().data[0].id
    run = uuid.uuid4().hex[:8]
    # long_doc_qa's documents: a distinct head, then one repeated word. The recipe counts
    # a word as a token; the model's own tokenizer says how many words make doc_tokens
    # (the lab's model takes 3 tokens per "hi ": uncounted, the documents were 12,304)
    # and a few fillers make each exactly doc_tokens, as the bench's prompts are (a shorter
    # document ends in a partial chunk LMCache does not hold: it is recomputed on a hit)
    words = words_for(query_url, key, model, doc_tokens, f"{run} document 0: ")
    docs = [exact(query_url, key, model, f"{run} document {i}: " + "hi " * words, doc_tokens)
            for i in range(n_docs)]
    controls = [exact(query_url, key, model, f"{run} control {i}: " + "hi " * words,
                      doc_tokens) for i in range(n_docs)]
    lengths = [tokens(query_url, key, model, text) for text in docs + controls]
    cold = [ttft(query, model, text) for text in controls]
    for doc in docs:  # the warm-up round, on the other host
        ttft(warm, model, doc)
    time.sleep(5)  # LMCache writes the bucket asynchronously
    hits = [ttft(query, model, doc) for doc in docs]
    print(json.dumps({"doc_tokens": doc_tokens, "docs": n_docs, "model": model,
                      "prompt_tokens": [min(lengths), max(lengths)],
                      "cold_s": cold, "other_host_hit_s": hits,
                      "cold_median_s": statistics.median(cold),
                      "other_host_hit_median_s": statistics.median(hits)}))


if __name__ == "__main__":
    main()
