#!/usr/bin/env bash
# Makes sure `prometheus` and `promtool` are on PATH: installs Debian's prometheus package when
# they are missing and we may (root with apt-get), else says what to install.
set -euo pipefail
if command -v prometheus >/dev/null && command -v promtool >/dev/null; then
  exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "observability: installing Debian's prometheus package" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q prometheus >/dev/null ||
    { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q prometheus >/dev/null; }
  # The package may start a service of its own; the test runs its own instance.
  pkill -x prometheus 2>/dev/null || true
  exit 0
fi
echo "observability: prometheus and promtool are needed (Debian/Ubuntu: apt-get install prometheus)" >&2
exit 1
