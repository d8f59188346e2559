#!/usr/bin/env bash
# Builds kube-apiserver, kube-controller-manager, kubectl and etcd from the Go module proxy into a
# cache under the home directory. A binary already in the cache is not rebuilt.
#
# k8s.io/kubernetes cannot be `go install`ed: its go.mod requires every staging module at v0.0.0
# and replaces it with a local path. A wrapper module that requires k8s.io/kubernetes and replaces
# each staging module with its published v0.Y.Z release resolves the same build graph.
set -euo pipefail

KUBE_VERSION="${KUBE_VERSION:-v1.37.2}"
ETCD_VERSION="${ETCD_VERSION:-v3.6.16}"
CACHE_ROOT="${TORCHJOB_CACHE:-$HOME/.cache/torchjob}"
# Bump BUILD_RECIPE when the way the binaries are built changes, so caches are rebuilt.
BUILD_RECIPE=2
KUBE_DIR="$CACHE_ROOT/kubernetes-$KUBE_VERSION-r$BUILD_RECIPE"
ETCD_DIR="$CACHE_ROOT/etcd-$ETCD_VERSION"
# kube-scheduler places pods on fake nodes in the gang-scheduling tests of the control plane.
KUBE_BINARIES=(kube-apiserver kube-controller-manager kube-scheduler kubectl)
# What a real node adds to the control plane (`make node-up`); built with the same recipe.
KUBE_NODE_BINARIES=(kubelet kube-proxy)

export CGO_ENABLED=0 GOFLAGS="-mod=mod -buildvcs=false" GOTOOLCHAIN=local
LDFLAGS="-s -w"

kube_version_ldflags() {
  # What a release build stamps, so /version and `kubectl version` report the real version.
  local minor="${KUBE_VERSION#v1.}"; minor="${minor%%.*}"
  local pkg
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    printf -- '-X %s.gitVersion=%s -X %s.gitMajor=1 -X %s.gitMinor=%s -X %s.gitTreeState=clean ' \
      "$pkg" "$KUBE_VERSION" "$pkg" "$pkg" "$minor" "$pkg"
  done
}

log() { printf '[control-plane] %s\n' "$*" >&2; }

staging_replaces() {
  # Every staging module listed in that release's own go.mod, pinned to the matching v0.Y.Z.
  local gomod staging_version
  gomod=$(go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" | sed -n 's/.*"GoMod": "\(.*\)",/\1/p')
  staging_version="v0.${KUBE_VERSION#v1.}"
  grep -E '^\s*k8s\.io/[a-z0-9-]+ => \./staging/' "$gomod" | awk -v ver="$staging_version" '{print "\t" $1 " => " $1 " " ver}'
}

build_kubernetes() {
  local missing=()
  for bin in "$@"; do [[ -x "$KUBE_DIR/$bin" ]] || missing+=("$bin"); done
  if [[ ${#missing[@]} -eq 0 ]]; then log "kubernetes $KUBE_VERSION cached in $KUBE_DIR"; return; fi
  local work; work=$(mktemp -d); trap 'rm -rf "$work"' RETURN
  log "building ${missing[*]} $KUBE_VERSION (several minutes per binary when cold)"
  {
    echo "module torchjob.local/kubernetes-build"
    echo
    echo "go 1.26"
    echo
    echo "require k8s.io/kubernetes $KUBE_VERSION"
    echo
    echo "replace ("
    staging_replaces
    echo ")"
  } >"$work/go.mod"
  mkdir -p "$KUBE_DIR"
  for bin in "${missing[@]}"; do
    local start=$SECONDS
    (cd "$work" && go build -trimpath -ldflags "$LDFLAGS $(kube_version_ldflags)" -o "$KUBE_DIR/$bin.partial" "k8s.io/kubernetes/cmd/$bin")
    mv "$KUBE_DIR/$bin.partial" "$KUBE_DIR/$bin"
    log "built $bin in $((SECONDS - start))s"
  done
}

build_etcd() {
  if [[ -x "$ETCD_DIR/etcd" ]]; then log "etcd $ETCD_VERSION cached in $ETCD_DIR"; return; fi
  local work; work=$(mktemp -d); trap 'rm -rf "$work"' RETURN
  log "building etcd $ETCD_VERSION"
  cat >"$work/go.mod" <<MOD
module torchjob.local/etcd-build

go 1.26

require go.etcd.io/etcd/server/v3 $ETCD_VERSION
MOD
  cat >"$work/main.go" <<'GO'
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
  mkdir -p "$ETCD_DIR"
  local start=$SECONDS
  (cd "$work" && go build -trimpath -ldflags "$LDFLAGS" -o "$ETCD_DIR/etcd.partial" .)
  mv "$ETCD_DIR/etcd.partial" "$ETCD_DIR/etcd"
  log "built etcd in $((SECONDS - start))s"
}

case "${1:-build}" in
  build) build_etcd; build_kubernetes "${KUBE_BINARIES[@]}" ;;
  build-node) build_etcd; build_kubernetes "${KUBE_BINARIES[@]}" "${KUBE_NODE_BINARIES[@]}" ;;
  print-dirs) echo "KUBE_DIR=$KUBE_DIR"; echo "ETCD_DIR=$ETCD_DIR" ;;
  print-version) echo "$KUBE_VERSION" ;;
  *) echo "usage: $0 [build|build-node|print-dirs|print-version]" >&2; exit 2 ;;
esac
