#!/usr/bin/env bash
# Debian's Chromium for the console's browser tests (tests/e2e/test_console*.py, tests/node), driven
# by Playwright through its executable path: no browser is downloaded by a test tool.
set -euo pipefail
command -v chromium >/dev/null && exit 0
echo "installing Debian package chromium" >&2
DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium fonts-dejavu-core >&2 ||
  { apt-get update >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium fonts-dejavu-core >&2; }
