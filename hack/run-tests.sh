#!/usr/bin/env bash
# Every test, as `make test` runs them: the real node's tier (tests/node) in a pytest of its own
# beside the other tiers. The node's tests wait on real pods, images and containers most of the
# time, the others on the control plane and local processes: one after the other they left a core
# idle most of the run. The node tier's output follows the others'; the exit status is the first
# failure's (pytest's 5, no test collected, included).
#
#   hack/run-tests.sh PYTEST [PYTEST_FLAGS...]
set -uo pipefail
cd "$(dirname "$0")/.."
pytest=$1
shift
log=$(mktemp -t torchjob-node-tier.XXXXXX)
"$pytest" tests/node "$@" >"$log" 2>&1 &
node=$!
trap 'kill "$node" 2>/dev/null; rm -f "$log"' EXIT
"$pytest" tests --ignore=tests/node "$@"
others=$?
wait "$node"
nodes=$?
echo "==================== tests/node (run beside the tiers above) ===================="
cat "$log"
if ((others != 0)); then
	exit "$others"
fi
exit "$nodes"
