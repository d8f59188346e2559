#!/usr/bin/env bash
# Builds Kueue's manager (sigs.k8s.io/kueue, the platform's quota and admission tool) from the Go
# module proxy into a cache under the home directory, with what running it needs beside it from
# the same module: its CRDs and its webhook configurations. Done once: a stamp written last marks
# a complete build, and a later run does nothing. tests/e2e/test_kueue.py runs it
# (tests/support/kueue.py).
#
# `start` builds in the background and returns at once; `wait` waits for that build (or builds
# in the foreground when none was started) and fails, with the build's log, if it failed. A cold
# build takes 5 to 10 minutes of both cores, while most of `make test` waits on clusters with
# cores to spare: `make test` starts it before the lint and the tests, and its Kueue tests,
# collected last, wait for it.
set -euo pipefail

KUEUE_VERSION="${KUEUE_VERSION:-v0.17.0}"
CACHE_ROOT="${TORCHJOB_CACHE:-$HOME/.cache/torchjob}"
KUEUE_DIR="$CACHE_ROOT/kueue-$KUEUE_VERSION"
STAMP="$KUEUE_DIR/.built"
# The background build's process id and output, beside the build (not in it: a build replaces it).
PID_FILE="$KUEUE_DIR.pid"
LOG_FILE="$KUEUE_DIR.log"
# Where the release keeps its CRDs (one file per kind) and its webhook configurations, both
# written for a Service in its namespace; tests/support/kueue.py points them at the process.
CRD_DIR=config/components/crd/bases
WEBHOOK_MANIFESTS=config/components/webhook/manifests.yaml

export CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS="-mod=mod -buildvcs=false"

log() { printf '[kueue] %s\n' "$*" >&2; }

build_kueue() {
  if [[ -f "$STAMP" ]]; then log "kueue $KUEUE_VERSION cached in $KUEUE_DIR"; return; fi
  local work; work=$(mktemp -d); trap 'rm -rf "$work"' RETURN
  log "building kueue $KUEUE_VERSION (several minutes when cold)"
  local start=$SECONDS
  GOBIN="$work" go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kueue/cmd/kueue@$KUEUE_VERSION"
  local source
  source=$(go mod download -json "sigs.k8s.io/kueue@$KUEUE_VERSION" | sed -n 's/.*"Dir": "\(.*\)",/\1/p')
  rm -rf "$KUEUE_DIR"
  mkdir -p "$KUEUE_DIR/crds" "$KUEUE_DIR/webhook"
  cp "$source/$CRD_DIR/"*.yaml "$KUEUE_DIR/crds/"
  cp "$source/$WEBHOOK_MANIFESTS" "$KUEUE_DIR/webhook/manifests.yaml"
  chmod -R u+w "$KUEUE_DIR"
  mv "$work/kueue" "$KUEUE_DIR/kueue"
  touch "$STAMP"
  log "built kueue in $((SECONDS - start))s"
}

building() { [[ -f "$PID_FILE" ]] && kill -0 "$(cat "$PID_FILE")" 2>/dev/null; }

start_kueue() {
  if [[ -f "$STAMP" ]]; then log "kueue $KUEUE_VERSION cached in $KUEUE_DIR"; return; fi
  if building; then log "kueue $KUEUE_VERSION is being built (pid $(cat "$PID_FILE"))"; return; fi
  mkdir -p "$CACHE_ROOT"
  setsid "$0" build >"$LOG_FILE" 2>&1 </dev/null &
  echo $! >"$PID_FILE"
  log "building kueue $KUEUE_VERSION in the background (pid $!, its output in $LOG_FILE)"
}

wait_kueue() {
  if [[ ! -f "$PID_FILE" ]]; then build_kueue; return; fi
  while building; do sleep 2; done
  rm -f "$PID_FILE"
  if [[ -f "$STAMP" ]]; then return; fi
  log "the background build failed; its output ($LOG_FILE) ends:"
  tail -n 40 "$LOG_FILE" >&2
  exit 1
}

case "${1:-build}" in
  build) build_kueue ;;
  start) start_kueue ;;
  wait) wait_kueue ;;
  print-dir) echo "$KUEUE_DIR" ;;
  *) echo "usage: $0 [build|start|wait|print-dir]" >&2; exit 2 ;;
esac
