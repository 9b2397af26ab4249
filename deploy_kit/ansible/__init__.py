"""Driving Ansible: a pure request-to-argv builder, event parsing, and the one runner call."""
