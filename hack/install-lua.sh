#!/usr/bin/env bash
# A Lua interpreter for the Argo CD health check's tests (tests/e2e/test_gitops_health.py):
# Debian's lua5.4 when no `lua` is on PATH. Argo CD runs health scripts with gopher-lua (Lua 5.1
# semantics); the script uses nothing that differs between 5.1 and 5.4.
set -euo pipefail
command -v lua >/dev/null && exit 0
command -v lua5.4 >/dev/null && exit 0
echo "installing Debian package lua5.4" >&2
DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends lua5.4 >&2 ||
  { apt-get update >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends lua5.4 >&2; }
