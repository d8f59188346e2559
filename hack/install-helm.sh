#!/usr/bin/env bash
# Installs helm from the Go module proxy into a cache under the home directory and prints its path.
# A binary already in the cache is not rebuilt.
set -euo pipefail

HELM_VERSION="${HELM_VERSION:-v3.22.0}"
CACHE_ROOT="${TORCHJOB_CACHE:-$HOME/.cache/torchjob}"
HELM_DIR="$CACHE_ROOT/helm-$HELM_VERSION"

export CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS="-buildvcs=false"

log() { printf '[helm] %s\n' "$*" >&2; }

release_ldflags() {
  # What helm's own release build stamps: its version, and the Kubernetes version of the
  # client-go it is built with, which `helm template` and `helm lint` assume by default
  # (v1.20 otherwise).
  local gomod k8s_minor
  gomod=$(go mod download -json "helm.sh/helm/v3@$HELM_VERSION" | sed -n 's/.*"GoMod": "\(.*\)",/\1/p')
  k8s_minor=$(sed -n 's/^[[:space:]]*k8s\.io\/client-go v0\.\([0-9]*\)\..*/\1/p' "$gomod")
  printf -- '-s -w -X helm.sh/helm/v3/internal/version.version=%s ' "$HELM_VERSION"
  local pkg
  for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
    printf -- '-X %s.k8sVersionMajor=1 -X %s.k8sVersionMinor=%s ' "$pkg" "$pkg" "$k8s_minor"
  done
}

install_helm() {
  if [[ -x "$HELM_DIR/helm" ]]; then log "helm $HELM_VERSION cached in $HELM_DIR"; return; fi
  local work; work=$(mktemp -d); trap 'rm -rf "$work"' RETURN
  log "installing helm $HELM_VERSION (a few minutes when cold)"
  local start=$SECONDS
  GOBIN="$work" go install -trimpath -ldflags "$(release_ldflags)" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
  mkdir -p "$HELM_DIR"
  mv "$work/helm" "$HELM_DIR/helm"
  log "installed helm in $((SECONDS - start))s"
}

case "${1:-install}" in
  install) install_helm ;;
  print-path) echo "$HELM_DIR/helm" ;;
  *) echo "usage: $0 [install|print-path]" >&2; exit 2 ;;
esac
