#!/usr/bin/env bash
# Makes sure the console's browser suite has a browser: Debian's chromium and chromium-driver
# (/usr/bin/chromium, /usr/bin/chromedriver, or CHROMIUM / CHROMEDRIVER). Installs them when they
# are missing and we may (root with apt-get), else says what to install.
set -euo pipefail
chromium=${CHROMIUM:-/usr/bin/chromium}
chromedriver=${CHROMEDRIVER:-/usr/bin/chromedriver}
if [ -x "$chromium" ] && [ -x "$chromedriver" ]; then
  exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "console: installing Debian's chromium and chromium-driver" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium chromium-driver >/dev/null ||
    { apt-get update -q >/dev/null &&
      DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium chromium-driver >/dev/null; }
  exit 0
fi
echo "console: chromium and chromedriver are needed (Debian/Ubuntu: apt-get install chromium chromium-driver)" >&2
exit 1
