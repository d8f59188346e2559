#!/usr/bin/env bash
# Builds Kubeflow's training-operator from its release source on the Go module proxy into a
# cache under the home directory, for the side-by-side bench (tests/bench/kubeflow.py) only: no
# test needs it. A binary already in the cache is not rebuilt.
#
# v1.9.3's go.mod has no replace directives, so the module builds as published; it is built from
# a writable copy of the downloaded module (the module cache is read-only) with its own go.sum.
set -euo pipefail

KUBEFLOW_VERSION="${KUBEFLOW_VERSION:-v1.9.3}"
CACHE_ROOT="${TORCHJOB_CACHE:-$HOME/.cache/torchjob}"
OUT_DIR="$CACHE_ROOT/training-operator-$KUBEFLOW_VERSION"
MODULE="github.com/kubeflow/training-operator"
BINARY="training-operator"

export CGO_ENABLED=0 GOFLAGS="-mod=mod -buildvcs=false" GOTOOLCHAIN=local

log() { printf '[kubeflow] %s\n' "$*" >&2; }

build() {
  if [[ -x "$OUT_DIR/$BINARY" ]]; then log "training-operator $KUBEFLOW_VERSION cached in $OUT_DIR"; return; fi
  local work source start=$SECONDS
  work=$(mktemp -d); trap 'chmod -R u+w "$work"; rm -rf "$work"' RETURN
  log "building training-operator $KUBEFLOW_VERSION (a few minutes when cold)"
  source=$(go mod download -json "$MODULE@$KUBEFLOW_VERSION" | sed -n 's/.*"Dir": "\(.*\)",/\1/p')
  cp -r "$source" "$work/src" && chmod -R u+w "$work/src"
  mkdir -p "$OUT_DIR"
  (cd "$work/src" && go build -trimpath -ldflags "-s -w" -o "$OUT_DIR/$BINARY.partial" ./cmd/training-operator.v1)
  mv "$OUT_DIR/$BINARY.partial" "$OUT_DIR/$BINARY"
  log "built $OUT_DIR/$BINARY in $((SECONDS - start))s"
}

case "${1:-build}" in
  build) build ;;
  print-binary) echo "$OUT_DIR/$BINARY" ;;
  *) echo "usage: $0 [build|print-binary]" >&2; exit 2 ;;
esac
