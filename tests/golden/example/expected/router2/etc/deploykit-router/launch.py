# Managed by deploykit; local changes are overwritten.
# vllm-router with its instance key from VLLM_ROUTER_API_KEY (render/router.py)
import os
import sys

from vllm_router.launch_router import main

key = os.environ.pop("VLLM_ROUTER_API_KEY", "")
if key:
    sys.argv += ["--api-key", key]
sys.exit(main())
