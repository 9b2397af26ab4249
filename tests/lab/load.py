"""A client that keeps sending fresh prompts to every serving host while a lab test changes
the tier under it: each prompt makes LMCache store two new chunks through the gateways, so a
failed request, a gateway that drops a connection or a tripped breaker shows up here."""

from __future__ import annotations

import random
import threading
import time

from tests.lab.vllm_http import SERVING, complete


class FreshPrompts:
    """Fresh two-chunk prompts to each serving host in turn until stopped (a context manager);
    `sent` counts the answered ones, `errors` names every failed one."""

    def __init__(self, hosts: dict[str, str] | None = None) -> None:
        self.hosts = dict(hosts or SERVING)
        self.stop = threading.Event()
        self.sent = 0
        self.errors: list[str] = []
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.rng = random.Random(time.time_ns())

    def run(self) -> None:
        while not self.stop.is_set():
            for address in self.hosts.values():
                try:
                    complete(address, [self.rng.randrange(3, 259) for _ in range(256 * 2 + 5)])
                    self.sent += 1
                except OSError as exc:
                    self.errors.append(f"{address}: {exc}")

    def __enter__(self) -> FreshPrompts:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=600)
