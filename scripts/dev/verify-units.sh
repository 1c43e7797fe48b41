#!/usr/bin/env bash
# The systemd units of deploy/systemd/ checked as systemd reads them: `systemd-analyze verify`
# (any complaint fails), then each unit's `systemd-analyze security` exposure score (offline).
# The units name /usr/local/bin/quiesce; the check points them at this checkout's build.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
if ! command -v systemd-analyze >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "units: installing systemd (for systemd-analyze) from the distribution's packages" >&2
    apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq systemd >&2
  else
    echo "units: systemd-analyze not found; install systemd (Debian/Ubuntu: sudo apt-get install systemd)" >&2
    exit 1
  fi
fi
binary="$root/target/debug/quiesce"
[ -x "$binary" ] || { echo "units: build the binary first (cargo build)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for unit in "$root"/deploy/systemd/*.service; do
  sed "s|/usr/local/bin/quiesce|$binary|g" "$unit" > "$work/$(basename "$unit")"
done
complaints=$(systemd-analyze verify "$work"/*.service 2>&1) || { echo "$complaints" >&2; exit 1; }
if [ -n "$complaints" ]; then
  echo "$complaints" >&2
  echo "units: systemd-analyze verify complained" >&2
  exit 1
fi
echo "units: systemd-analyze verify passed on $(ls "$work" | tr '\n' ' ')"
for unit in "$work"/*.service; do
  score=$(systemd-analyze security --offline=yes "$unit" 2>&1 | grep -o 'Overall exposure level for .*')
  echo "units: $score"
done
