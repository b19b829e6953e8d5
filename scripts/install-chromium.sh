#!/usr/bin/env bash
# Installs Debian's Chromium and its WebDriver (packages `chromium` and `chromium-driver`) for the
# web inbox's browser tests (host/tollgate/tests/browser), idempotently: when both are already
# there it only prints their versions. The tests start their own headless browser with a fresh
# profile; no display is needed.
set -euo pipefail

have() { [ -x /usr/bin/chromedriver ] && { [ -x /usr/lib/chromium/chromium ] || [ -x /usr/bin/chromium ]; }; }

if ! have; then
  if [ "$(id -u)" != 0 ]; then
    echo "install-chromium: Chromium is missing and this is not root; run: sudo apt-get install -y chromium chromium-driver" >&2
    exit 1
  fi
  echo "install-chromium: installing the Debian packages chromium and chromium-driver" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium chromium-driver >&2
  have || { echo "install-chromium: installed, but /usr/bin/chromedriver or chromium is missing" >&2; exit 1; }
fi
echo "install-chromium: $(/usr/bin/chromedriver --version | head -n1)"
