#!/usr/bin/env bash
# Headless Chromium for the CPU map page test (tests/api/test_api_page_browser.py).
# Installs Debian's `chromium` package when /usr/bin/chromium is missing. Idempotent.
# When installation is impossible (not root, no apt-get, no network) it says so and exits 0:
# the page test then skips with a visible reason instead of failing the whole run.
set -u

CHROMIUM=/usr/bin/chromium

if [ -x "$CHROMIUM" ]; then
    echo "install-chromium: $CHROMIUM present ($("$CHROMIUM" --version 2>/dev/null || echo 'version unknown'))"
    exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
    echo "install-chromium: no apt-get on this machine; the browser page test will be skipped"
    exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
    echo "install-chromium: $CHROMIUM missing and not running as root; install Debian's" \
        "'chromium' package yourself, or the browser page test will be skipped"
    exit 0
fi

echo "install-chromium: $CHROMIUM missing; running apt-get update"
if ! apt-get update -qq; then
    echo "install-chromium: apt-get update failed; the browser page test will be skipped"
    exit 0
fi

echo "install-chromium: installing Debian package 'chromium'"
if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    chromium fonts-dejavu-core >/dev/null; then
    echo "install-chromium: apt-get install chromium failed; the browser page test will be skipped"
    exit 0
fi

if [ -x "$CHROMIUM" ]; then
    echo "install-chromium: installed $("$CHROMIUM" --version 2>/dev/null || echo "$CHROMIUM")"
else
    echo "install-chromium: package installed but $CHROMIUM is missing; the page test will be skipped"
fi
exit 0
