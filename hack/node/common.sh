# Names, paths and address ranges shared by hack/node.sh and hack/node-images.sh (sourced).

CACHE_ROOT="${TORCHJOB_CACHE:-$HOME/.cache/torchjob}"
# What `down` removes: state, certificates, the kubelet's pods; and the runtime's sockets.
NODE_DIR="${TORCHJOB_NODE_DIR:-/var/lib/torchjob-node}"
RUN_DIR=/run/torchjob-node
# Kept after `down`, for post-mortems; the next `up` appends to it.
LOG_DIR=/var/log/torchjob-node
# The image store outlives `down`: images cannot be pulled again, only rebuilt.
CONTAINERD_ROOT="$CACHE_ROOT/node/containerd"
CONTAINERD_SOCKET="$RUN_DIR/containerd.sock"
BUILDAH_ROOT="$CACHE_ROOT/node/buildah"
IMAGES_DIR="$CACHE_ROOT/node/images"
# The example's wheels, downloaded by `make` (WHEELS in the Makefile).
WHEELS_DIR="$CACHE_ROOT/wheels"
KUBELET_DIR="$NODE_DIR/kubelet"
KUBECONFIG_ADMIN="$NODE_DIR/admin.kubeconfig"

NODE_NAME=torchjob-node
CHART_NAMESPACE=torchjob-system
CLUSTER_CIDR=10.244.0.0/16
POD_CIDR=10.244.0.0/24
SERVICE_CIDR=10.96.0.0/16
KUBERNETES_SERVICE_IP=10.96.0.1
DNS_IP=10.96.0.10
CNI_BRIDGE=torchjob0
RULE_COMMENT=torchjob-node
COMPONENTS=(containerd etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy)

IMAGE_PREFIX=localhost/torchjob
PAUSE_IMAGE="$IMAGE_PREFIX/pause:1"
BASE_IMAGE="$IMAGE_PREFIX/python-base:bookworm"
TORCHJOB_IMAGE_REPOSITORY="$IMAGE_PREFIX/torchjob"
EXAMPLE_IMAGE="$IMAGE_PREFIX/mnist-ddp:0.1.0"

load_build_dirs() {
  # The binaries' places, from the build scripts (the one source of their versions).
  local here; here="$(dirname "${BASH_SOURCE[0]}")/.."
  eval "$("$here/build-control-plane.sh" print-dirs)"
  eval "$("$here/build-node.sh" print-dirs)"
  KUBE_VERSION=$("$here/build-control-plane.sh" print-version)
  HELM=$("$here/install-helm.sh" print-path)
  COREDNS_IMAGE="$IMAGE_PREFIX/coredns:$COREDNS_VERSION"
  METRICS_SERVER_IMAGE="$IMAGE_PREFIX/metrics-server:$METRICS_SERVER_VERSION"
  export KUBE_DIR ETCD_DIR CNI_DIR COREDNS_DIR PAUSE_DIR COREDNS_VERSION HELM COREDNS_IMAGE \
    METRICS_SERVER_DIR METRICS_SERVER_VERSION METRICS_SERVER_IMAGE
}

kubectl_() { "$KUBE_DIR/kubectl" --kubeconfig "$KUBECONFIG_ADMIN" "$@"; }

ctr_() { ctr --address "$CONTAINERD_SOCKET" --namespace k8s.io "$@"; }
