#!/usr/bin/python
"""The health gate every role shares: wait until each URL answers 200, all polled at once."""

from __future__ import annotations

import time
import urllib.error
import urllib.request

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: deploykit_http_wait
short_description: Wait until every URL answers HTTP 200 (one task for a host's endpoints)
description: >-
  Polls every URL from the host it runs on (no proxy), each round asking only those that have
  not answered 200 yet, until all have or the timeout passes; then fails naming each URL
  that has not, with its last status or error. One call replaces a loop of uri tasks with
  retries (each gateway instance, /health then /v1/models, ...). Reads only: never changed.
options:
  urls: {type: list, elements: str, required: true, description: the endpoints}
  timeout: {type: int, default: 60, description: seconds before failing}
  interval: {type: float, default: 1.0, description: seconds between rounds}
  bearer: {type: str, default: "", no_log: true, description: >-
    a token sent as `Authorization: Bearer` (vLLM's API key for /v1/models); empty: none}
author: deploykit
"""

RETURN = r"""
waited: {description: seconds until every URL answered, type: float}
status: {description: each URL's last status (or error), type: dict}
"""

NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def status_of(url: str, timeout: float, bearer: str = "") -> str:
    request = urllib.request.Request(
        url, headers={"Authorization": f"Bearer {bearer}"} if bearer else {})
    try:
        with NO_PROXY.open(request, timeout=timeout) as answer:
            return str(answer.status)
    except urllib.error.HTTPError as exc:
        return str(exc.code)
    except (OSError, ValueError) as exc:
        return type(exc).__name__ if not str(exc) else str(exc)[:120]


def main() -> None:
    module = AnsibleModule(
        argument_spec={"urls": {"type": "list", "elements": "str", "required": True},
                       "timeout": {"type": "int", "default": 60},
                       "interval": {"type": "float", "default": 1.0},
                       "bearer": {"type": "str", "default": "", "no_log": True}},
        supports_check_mode=True)
    urls, timeout = module.params["urls"], module.params["timeout"]
    started = time.monotonic()
    status = {url: "not asked" for url in urls}
    while True:
        for url in [u for u in urls if status[u] != "200"]:
            status[url] = status_of(url, timeout=min(5.0, max(1.0, timeout)),
                                    bearer=module.params["bearer"])
        waiting = [u for u in urls if status[u] != "200"]
        waited = round(time.monotonic() - started, 1)
        if not waiting:
            module.exit_json(changed=False, waited=waited, status=status)
        if waited >= timeout:
            module.fail_json(msg=f"no 200 after {timeout} s from: "
                                 + "; ".join(f"{u} ({status[u]})" for u in waiting),
                             waited=waited, status=status)
        time.sleep(module.params["interval"])


if __name__ == "__main__":
    main()
