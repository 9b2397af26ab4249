"""How deploykit talks to hosts (through Ansible), to S3 (SigV4-signed requests) and to vLLM's
OpenAI-compatible server (openai)."""
