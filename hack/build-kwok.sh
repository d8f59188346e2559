#!/usr/bin/env bash
# Builds kwok (sigs.k8s.io/kwok, fake nodes that play their pods' lifecycle) from the Go module
# proxy into a cache under the home directory, with kwok's own default Stages of the release
# beside it. Done once: a stamp written last marks a complete build, and a later run does nothing.
# A dependency of the scale benchmarks (tests/bench/scale.py), not of `make test`.
set -euo pipefail

KWOK_VERSION="${KWOK_VERSION:-v0.8.0}"
CACHE_ROOT="${TORCHJOB_CACHE:-$HOME/.cache/torchjob}"
KWOK_DIR="$CACHE_ROOT/kwok-$KWOK_VERSION"
STAMP="$KWOK_DIR/.built"
# kwok's "fast" Stages: nodes Ready at once, pods Running once bound (not its pod-delete: see
# KWOK_STAGES in tests/support/scale.py).
# Its pod-complete Stage ends only the pods of batch Jobs; the scale tier's own Stages
# (tests/support/scale_stages.yaml) end the pods a bench asks to end.
STAGES=(node/fast/node-initialize.yaml pod/fast/pod-ready.yaml)

export CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS="-mod=mod -buildvcs=false"

log() { printf '[kwok] %s\n' "$*" >&2; }

build_kwok() {
  if [[ -f "$STAMP" ]]; then log "kwok $KWOK_VERSION cached in $KWOK_DIR"; return; fi
  local work; work=$(mktemp -d); trap 'rm -rf "$work"' RETURN
  log "building kwok $KWOK_VERSION (a few minutes when cold)"
  local start=$SECONDS
  GOBIN="$work" go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
  local source
  source=$(go mod download -json "sigs.k8s.io/kwok@$KWOK_VERSION" | sed -n 's/.*"Dir": "\(.*\)",/\1/p')
  mkdir -p "$KWOK_DIR/stages"
  local stage
  for stage in "${STAGES[@]}"; do cp "$source/kustomize/stage/$stage" "$KWOK_DIR/stages/"; done
  chmod u+w "$KWOK_DIR/stages/"*
  mv "$work/kwok" "$KWOK_DIR/kwok"
  touch "$STAMP"
  log "built kwok in $((SECONDS - start))s"
}

case "${1:-build}" in
  build) build_kwok ;;
  print-dir) echo "$KWOK_DIR" ;;
  *) echo "usage: $0 [build|print-dir]" >&2; exit 2 ;;
esac
