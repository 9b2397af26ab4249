"""How deploykit talks to hosts (through Ansible) and to S3 (SigV4-signed requests)."""
