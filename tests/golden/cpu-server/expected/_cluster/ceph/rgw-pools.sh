#!/bin/sh
# Managed by deploykit; local changes are overwritten.
# RGW pools, created before any gateway starts (a gateway would create them with defaults).
set -eu
ceph osd pool set noautoscale
ceph osd pool create default.rgw.buckets.data 2048 2048 replicated
ceph osd pool set default.rgw.buckets.data size 2
ceph osd pool set default.rgw.buckets.data min_size 1
ceph osd pool set default.rgw.buckets.data pg_autoscale_mode off
ceph osd pool application enable default.rgw.buckets.data rgw
ceph osd pool create default.rgw.buckets.index 64 64 replicated
ceph osd pool set default.rgw.buckets.index size 2
ceph osd pool set default.rgw.buckets.index min_size 1
ceph osd pool set default.rgw.buckets.index pg_autoscale_mode off
ceph osd pool application enable default.rgw.buckets.index rgw
ceph osd pool create default.rgw.buckets.non-ec 64 64 replicated
ceph osd pool set default.rgw.buckets.non-ec size 2
ceph osd pool set default.rgw.buckets.non-ec min_size 1
ceph osd pool set default.rgw.buckets.non-ec pg_autoscale_mode off
ceph osd pool application enable default.rgw.buckets.non-ec rgw
