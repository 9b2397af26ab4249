"""deploykit: provision and verify a shared KV-cache tier for vLLM + LMCache on Ceph RGW."""

__version__ = "0.1.0"
