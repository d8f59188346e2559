#!/usr/bin/env bash
# Builds the node's images with buildah and imports them into the node's containerd (which must be
# running): the sandbox (pause), CoreDNS and metrics-server images FROM scratch, a Python base
# image made with debootstrap, the project's image from the project's Dockerfile on that base, and
# the example's image from examples/mnist-ddp/Dockerfile. An image whose inputs have not changed
# since it was imported is not built again.
#
#   hack/node-images.sh all | pause | coredns | metrics-server | base | torchjob | example
#   hack/node-images.sh torchjob-of <source tree>   # another tree's image; prints its tag
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/.." && pwd)"
# shellcheck source=hack/node/common.sh
source "$HERE/node/common.sh"
load_build_dirs

DEBIAN_SUITE=bookworm
DEBIAN_MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
BASE_PACKAGES=python3,python3-venv,python-is-python3,ca-certificates
# Bump when the way the base image is made changes.
BASE_RECIPE=1
BASE_ROOTFS="$CACHE_ROOT/node/rootfs-$DEBIAN_SUITE-r$BASE_RECIPE"

log() { printf '[node-images] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

buildah_() {
  buildah --root "$BUILDAH_ROOT/storage" --runroot "$RUN_DIR/buildah" --storage-driver overlay "$@"
}

inputs_key() {  # a hash of the named files' contents and of the extra words given after `--`
  local files=() extra=()
  while (($#)) && [[ $1 != -- ]]; do files+=("$1"); shift; done
  (($#)) && shift && extra=("$@")
  { cat "${files[@]}"; printf '%s\n' "${extra[@]}"; } | sha256sum | cut -c1-16
}

current() {  # <name> <image ref> <key>: imported before with the same inputs
  [[ "$(cat "$IMAGES_DIR/$1.key" 2>/dev/null)" == "$3" ]] && [[ -n "$(ctr_ images ls -q "name==$2")" ]]
}

import_image() {  # <name> <image ref> <key>: from buildah's store into containerd's
  local name=$1 ref=$2 key=$3 archive
  mkdir -p "$IMAGES_DIR"
  archive=$(mktemp -p "$CACHE_ROOT/node" "$name.XXXXXX.tar")
  trap 'rm -f "$archive"' EXIT
  buildah_ push --quiet "$ref" "docker-archive:$archive:$ref" >/dev/null
  # Removed first, so that the image it replaces is collected (an import over a name is not).
  ctr_ images rm --sync "$ref" >/dev/null 2>&1 || true
  ctr_ images import "$archive" >/dev/null
  rm -f "$archive"
  trap - EXIT
  echo "$key" >"$IMAGES_DIR/$name.key"
}

build() {  # <name> <image ref> <key> <buildah bud arguments...>
  local name=$1 ref=$2 key=$3 start=$SECONDS; shift 3
  if current "$name" "$ref" "$key"; then log "$ref is current"; return; fi
  log "building $ref"
  buildah_ bud --quiet --isolation chroot --layers --pull=never -t "$ref" "$@" >/dev/null
  import_image "$name" "$ref" "$key"
  log "built and imported $ref in $((SECONDS - start))s"
}

image_id() { buildah_ images --noheading --no-trunc --format '{{.ID}}' "$1" 2>/dev/null | head -n1; }

pause_image() {
  build pause "$PAUSE_IMAGE" "$(inputs_key "$PAUSE_DIR/pause" "$HERE/node/images/pause.Containerfile")" \
    -f "$HERE/node/images/pause.Containerfile" "$PAUSE_DIR"
}

coredns_image() {
  build coredns "$COREDNS_IMAGE" "$(inputs_key "$COREDNS_DIR/coredns" "$HERE/node/images/coredns.Containerfile")" \
    -f "$HERE/node/images/coredns.Containerfile" "$COREDNS_DIR"
}

metrics_server_image() {
  build metrics-server "$METRICS_SERVER_IMAGE" \
    "$(inputs_key "$METRICS_SERVER_DIR/metrics-server" "$HERE/node/images/metrics-server.Containerfile")" \
    -f "$HERE/node/images/metrics-server.Containerfile" "$METRICS_SERVER_DIR"
}

make_rootfs() {
  [[ -f "$BASE_ROOTFS/.complete" ]] && return
  local partial="$BASE_ROOTFS.partial" start=$SECONDS
  rm -rf "$partial"
  log "debootstrap $DEBIAN_SUITE with $BASE_PACKAGES (a few minutes when cold)"
  debootstrap --variant=minbase --include="$BASE_PACKAGES" "$DEBIAN_SUITE" "$partial" "$DEBIAN_MIRROR" >&2
  rm -rf "$partial"/var/cache/apt/archives/*.deb "$partial"/var/lib/apt/lists/*
  mv "$partial" "$BASE_ROOTFS"
  touch "$BASE_ROOTFS/.complete"
  log "debootstrap done in $((SECONDS - start))s"
}

base_image() {
  # The host's CA store goes into the image: pip inside an image build reaches the package index
  # only if the image trusts what the host trusts (as behind any TLS-inspecting proxy).
  local key; key=$(inputs_key /etc/ssl/certs/ca-certificates.crt -- "$BASE_RECIPE" "$BASE_PACKAGES")
  if current base "$BASE_IMAGE" "$key" && [[ -n "$(image_id "$BASE_IMAGE")" ]]; then
    log "$BASE_IMAGE is current"; return
  fi
  make_rootfs
  local container mount_point
  container=$(buildah_ from scratch)
  mount_point=$(buildah_ mount "$container")
  tar -C "$BASE_ROOTFS" --exclude=./.complete -c . | tar -C "$mount_point" -x
  cp /etc/ssl/certs/ca-certificates.crt "$mount_point/etc/ssl/certs/ca-certificates.crt"
  # pip verifies with its own bundle unless told to use the system's.
  printf '[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n' >"$mount_point/etc/pip.conf"
  buildah_ umount "$container" >/dev/null
  buildah_ config --env LANG=C.UTF-8 --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --cmd python "$container"
  buildah_ commit --quiet --rm "$container" "$BASE_IMAGE" >/dev/null
  import_image base "$BASE_IMAGE" "$key"
  log "made $BASE_IMAGE"
}

torchjob_files() {  # <source tree>
  # What the Dockerfile's context keeps (.dockerignore): pyproject.toml, README.md, services/.
  (cd "$1" && find Dockerfile .dockerignore pyproject.toml README.md services -type f \
    -not -path '*/__pycache__/*' -not -name '*.pyc' -not -path '*.egg-info/*' | sort)
}

torchjob_key() {  # <source tree>: the hash of what its image is built from
  local files
  mapfile -t files < <(torchjob_files "$1")
  (cd "$1" && inputs_key "${files[@]}" -- "$(image_id "$BASE_IMAGE")")
}

torchjob_image() {
  local key; key=$(torchjob_key "$REPO")
  # The tag is the inputs' hash, so that `helm upgrade` rolls the services when the code changed.
  echo "$key" >"$IMAGES_DIR/torchjob.tag"
  build torchjob "$TORCHJOB_IMAGE_REPOSITORY:$key" "$key" \
    -f "$REPO/Dockerfile" --build-arg "PYTHON_IMAGE=$BASE_IMAGE" "$REPO"
  # Earlier builds of the code are not run again: their tags only take up disk.
  local ref
  for ref in $(ctr_ images ls -q | grep "^$TORCHJOB_IMAGE_REPOSITORY:" | grep -v ":$key"); do
    ctr_ images rm "$ref" >/dev/null
  done
  for ref in $(buildah_ images --noheading --format '{{.Name}}:{{.Tag}}' | grep "^$TORCHJOB_IMAGE_REPOSITORY:" | grep -v ":$key"); do
    buildah_ rmi "$ref" >/dev/null 2>&1 || true
  done
  buildah_ rmi --prune >/dev/null 2>&1 || true
}

earlier_torchjob_image() {  # <source tree>: an earlier commit's image (tests/node/test_upgrade.py)
  local source=$1 key
  key=$(torchjob_key "$source")
  # Kept beside the current one until the current one is built again.
  build torchjob-earlier "$TORCHJOB_IMAGE_REPOSITORY:$key" "$key" \
    -f "$source/Dockerfile" --build-arg "PYTHON_IMAGE=$BASE_IMAGE" "$source"
  echo "$key"
}

example_image() {
  local dir="$REPO/examples/mnist-ddp" key
  key=$(inputs_key "$dir/Dockerfile" "$dir/requirements.txt" "$dir/train.py" "$dir/hf_trainer.py" "$dir/sdk_loop.py" -- "$(image_id "$BASE_IMAGE")")
  # The wheels `make` downloaded for the venv (WHEELS in the Makefile): torch and its CUDA
  # libraries come from PyPI once for the machine.
  [[ -d "$WHEELS_DIR" ]] || die "no wheels in $WHEELS_DIR: run make node-build (it downloads them)"
  build example "$EXAMPLE_IMAGE" "$key" -f "$dir/Dockerfile" --build-arg "PYTHON_IMAGE=$BASE_IMAGE" \
    --build-arg PIP_FIND_LINKS=/wheels --build-arg PIP_NO_INDEX=1 -v "$WHEELS_DIR:/wheels:ro" "$dir"
  # Several GB: once in containerd's store, buildah's copy and its layers only take up disk.
  if [[ -n "$(image_id "$EXAMPLE_IMAGE")" ]]; then
    buildah_ rmi "$EXAMPLE_IMAGE" >/dev/null
    buildah_ rmi --prune >/dev/null 2>&1 || true
  fi
}

prune_unnamed() {
  # The runtime also names each image by its id; once no name points at that image any more
  # (a rebuild), the id's name alone keeps its gigabytes alive.
  local named
  named=$(ctr_ images ls | awk 'NR > 1 && $1 !~ /^sha256:/ {print $3}' | sort -u)
  ctr_ images ls | awk 'NR > 1 && $1 ~ /^sha256:/ {print $1, $3}' | while read -r ref digest; do
    grep -qx "$digest" <<<"$named" || ctr_ images rm --sync "$ref" >/dev/null
  done
}

mkdir -p "$IMAGES_DIR" "$RUN_DIR"
case "${1:-all}" in
  all) pause_image; coredns_image; metrics_server_image; base_image; torchjob_image; example_image; prune_unnamed ;;
  pause) pause_image ;;
  coredns) coredns_image ;;
  metrics-server) metrics_server_image ;;
  base) base_image ;;
  torchjob) base_image; torchjob_image ;;
  torchjob-of) base_image >&2; earlier_torchjob_image "${2:?usage: $0 torchjob-of <source tree>}" ;;
  example) base_image; example_image ;;
  *) echo "usage: $0 all|pause|coredns|metrics-server|base|torchjob|example|torchjob-of <dir>" >&2; exit 2 ;;
esac
