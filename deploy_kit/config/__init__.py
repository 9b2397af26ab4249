"""Inventory: reading it (load), its typed model (models) and cross-host rules (rules)."""
