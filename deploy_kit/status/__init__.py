"""`deploykit status`: what runs where, at which version, and who is in DNS and Consul."""
