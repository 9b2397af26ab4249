"""The local lab: real Ceph daemons on this machine and systemd-nspawn hosts on a bridge.

Only loopback and the lab's own 10.99.0.0/24 addresses are ever contacted.
"""
