"""Runs: what a command does once its arguments are read (a converge, an upgrade's waves,
a rotation, a removal), below the command line and without it. Flows take plain values
(flows.request), print progress on the console, and raise deploy_kit.core.errors; the CLI
maps those to exit codes and usage errors."""
