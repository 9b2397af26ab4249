#!/bin/sh
# Managed by deploykit; local changes are overwritten.
# RGW pools, created before any gateway starts (a gateway would create them with defaults).
set -eu
ceph osd pool set noautoscale
ceph osd pool create default.rgw.buckets.data 32 32 replicated
ceph osd pool set default.rgw.buckets.data size 1 --yes-i-really-mean-it
ceph osd pool set default.rgw.buckets.data min_size 1
ceph osd pool set default.rgw.buckets.data pg_autoscale_mode off
ceph osd pool application enable default.rgw.buckets.data rgw
