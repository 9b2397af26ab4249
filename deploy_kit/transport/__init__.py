"""How deploykit talks to hosts and S3: SSH sessions and SigV4-signed requests."""
