#!/usr/bin/env bash
# Builds Kueue's manager (sigs.k8s.io/kueue, the platform's quota and admission tool) from the Go
# module proxy into a cache under the home directory, with what running it needs beside it from
# the same module: its CRDs and its webhook configurations. Done once: a stamp written last marks
# a complete build, and a later run does nothing. tests/e2e/test_kueue.py runs it
# (tests/support/kueue.py), so `make test` builds it first.
set -euo pipefail

KUEUE_VERSION="${KUEUE_VERSION:-v0.17.0}"
CACHE_ROOT="${TORCHJOB_CACHE:-$HOME/.cache/torchjob}"
KUEUE_DIR="$CACHE_ROOT/kueue-$KUEUE_VERSION"
STAMP="$KUEUE_DIR/.built"
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

case "${1:-build}" in
  build) build_kueue ;;
  print-dir) echo "$KUEUE_DIR" ;;
  *) echo "usage: $0 [build|print-dir]" >&2; exit 2 ;;
esac
