#!/usr/bin/env bash
# promtool and the blackbox exporter, which the tests use to check the rendered monitoring
# files (tests/unit/test_monitoring.py), taken out of Debian's packages without installing
# them: no Prometheus daemon starts on the machine that runs the tests.
set -euo pipefail
dest="${1:-/usr/local/bin}"
if command -v promtool >/dev/null && command -v prometheus-blackbox-exporter >/dev/null; then
  exit 0
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
apt-get download -q prometheus prometheus-blackbox-exporter >/dev/null 2>&1 || {
  apt-get update -q >/dev/null
  apt-get download -q prometheus prometheus-blackbox-exporter >/dev/null 2>&1
}
for deb in ./*.deb; do dpkg-deb -x "$deb" x; done
install -m 0755 x/usr/bin/promtool x/usr/bin/prometheus-blackbox-exporter "$dest/"
echo "installed promtool and prometheus-blackbox-exporter into $dest"
