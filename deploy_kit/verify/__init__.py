"""`deploykit verify`: probes gather observations; pure checks turn them into findings."""
