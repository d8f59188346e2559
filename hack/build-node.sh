#!/usr/bin/env bash
# Builds what a real node adds to the control plane's binaries, from the Go module proxy, into the
# cache under the home directory: the CNI plugins, CoreDNS, metrics-server and the sandbox ("pause")
# program.
# kube-scheduler, kubelet and kube-proxy come from hack/build-control-plane.sh build-node.
# A binary already in the cache is not rebuilt.
set -euo pipefail

CNI_PLUGINS_VERSION="${CNI_PLUGINS_VERSION:-v1.9.1}"
COREDNS_VERSION="${COREDNS_VERSION:-v1.15.0}"
METRICS_SERVER_VERSION="${METRICS_SERVER_VERSION:-v0.9.0}"
CACHE_ROOT="${TORCHJOB_CACHE:-$HOME/.cache/torchjob}"
HERE="$(cd "$(dirname "$0")" && pwd)"
CNI_DIR="$CACHE_ROOT/cni-plugins-$CNI_PLUGINS_VERSION"
COREDNS_DIR="$CACHE_ROOT/coredns-$COREDNS_VERSION"
METRICS_SERVER_DIR="$CACHE_ROOT/metrics-server-$METRICS_SERVER_VERSION"
# The pause program is ours; its cache key is a hash of its source.
PAUSE_DIR="$CACHE_ROOT/pause-$(cat "$HERE/node/pause/main.go" "$HERE/node/pause/go.mod" | sha256sum | cut -c1-12)"
CNI_PLUGINS=(bridge host-local loopback portmap)

export CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS="-buildvcs=false"
LDFLAGS="-s -w"

log() { printf '[node-build] %s\n' "$*" >&2; }

install_module_binary() {  # <dest dir> <binary name> <package@version>
  local dest=$1 name=$2 package=$3
  [[ -x "$dest/$name" ]] && return
  local work; work=$(mktemp -d)
  local start=$SECONDS
  GOBIN="$work" go install -trimpath -ldflags "$LDFLAGS" "$package"
  mkdir -p "$dest"
  mv "$work/$(basename "${package%@*}")" "$dest/$name"
  rm -rf "$work"
  log "built $name in $((SECONDS - start))s"
}

build_cni_plugins() {
  local plugin kind
  for plugin in "${CNI_PLUGINS[@]}"; do
    case $plugin in bridge | loopback) kind=main ;; host-local) kind=ipam ;; portmap) kind=meta ;; esac
    install_module_binary "$CNI_DIR" "$plugin" \
      "github.com/containernetworking/plugins/plugins/$kind/$plugin@$CNI_PLUGINS_VERSION"
  done
}

build_pause() {
  [[ -x "$PAUSE_DIR/pause" ]] && return
  mkdir -p "$PAUSE_DIR"
  (cd "$HERE/node/pause" && go build -trimpath -ldflags "$LDFLAGS" -o "$PAUSE_DIR/pause.partial" .)
  mv "$PAUSE_DIR/pause.partial" "$PAUSE_DIR/pause"
  log "built pause"
}

case "${1:-build}" in
  build)
    build_pause
    build_cni_plugins
    install_module_binary "$COREDNS_DIR" coredns "github.com/coredns/coredns@$COREDNS_VERSION"
    install_module_binary "$METRICS_SERVER_DIR" metrics-server \
      "sigs.k8s.io/metrics-server/cmd/metrics-server@$METRICS_SERVER_VERSION"
    ;;
  print-dirs)
    echo "CNI_DIR=$CNI_DIR"; echo "COREDNS_DIR=$COREDNS_DIR"; echo "PAUSE_DIR=$PAUSE_DIR"
    echo "COREDNS_VERSION=$COREDNS_VERSION"
    echo "METRICS_SERVER_DIR=$METRICS_SERVER_DIR"; echo "METRICS_SERVER_VERSION=$METRICS_SERVER_VERSION"
    ;;
  *) echo "usage: $0 [build|print-dirs]" >&2; exit 2 ;;
esac
