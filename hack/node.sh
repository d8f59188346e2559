#!/usr/bin/env bash
# A real single-node Kubernetes cluster on this machine, built from the package registries alone:
# etcd and the Kubernetes binaries from the Go module proxy (hack/build-control-plane.sh
# build-node), the CNI plugins, CoreDNS, metrics-server and the sandbox program likewise
# (hack/build-node.sh), containerd, runc, iptables, buildah and debootstrap from Debian's packages.
# Images are built here (hack/node-images.sh) and imported into containerd, since no container
# registry can be reached.
#
#   hack/node.sh build   install the Debian packages, build the binaries and the images
#   hack/node.sh up      build what is missing, start everything, install the chart; safe to repeat
#   hack/node.sh down    stop every process by PID, remove network rules, mounts and sandboxes
#   hack/node.sh status  exit 0 when the node is up and Ready
#   hack/node.sh env     print the variables a shell needs to use the cluster
#   hack/node.sh chart [<source tree> <image tag>]
#                        install the chart again (another tree's, with its node values and image)
#
# Needs root (network namespaces, mounts, iptables). Everything it creates lives in NODE_DIR and
# RUN_DIR, except the image store, which is kept in the cache so that images outlive `down`.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/.." && pwd)"
# shellcheck source=hack/node/common.sh
source "$HERE/node/common.sh"

ETCD_PORT=2379
ETCD_PEER_PORT=2380
APISERVER_PORT=6443
# The readiness every component is given, in seconds; the first start of a cold machine is slow.
STARTUP_TIMEOUT=180

log() { printf '[node] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

# -- processes ------------------------------------------------------------------------------------

pid_alive() { [[ -f "$NODE_DIR/pids/$1" ]] && kill -0 "$(cat "$NODE_DIR/pids/$1")" 2>/dev/null; }

start_process() {  # <name> <argv...>: in its own session, logging to LOG_DIR/<name>.log
  local name=$1; shift
  mkdir -p "$NODE_DIR/pids" "$LOG_DIR"
  setsid "$@" </dev/null >>"$LOG_DIR/$name.log" 2>&1 &
  echo $! >"$NODE_DIR/pids/$name"
}

wait_for() {  # <what> <process name> <command...>: until the command succeeds
  local what=$1 name=$2; shift 2
  local deadline=$((SECONDS + STARTUP_TIMEOUT))
  until "$@" >/dev/null 2>&1; do
    if ! pid_alive "$name"; then
      tail -n 30 "$LOG_DIR/$name.log" >&2 || true
      die "$name exited before $what"
    fi
    ((SECONDS < deadline)) || { tail -n 30 "$LOG_DIR/$name.log" >&2; die "$what: not after ${STARTUP_TIMEOUT}s"; }
    sleep 0.5
  done
}

restart_if_changed() {  # <name> <argv...>: start it; 1 when it already runs with this argv
  # A node brought up by an older hack/node.sh is brought to this one's flags by `up`.
  local name=$1 argv; shift
  argv=$(printf '%q ' "$@")
  if pid_alive "$name"; then
    [[ "$(cat "$NODE_DIR/pids/$name.argv" 2>/dev/null)" == "$argv" ]] && return 1
    log "$name runs with other flags: restarting it"
    stop_process "$name"
  fi
  start_process "$name" "$@"
  printf '%s' "$argv" >"$NODE_DIR/pids/$name.argv"
}

stop_process() {  # <name>: SIGTERM to its session, SIGKILL after a grace period
  local name=$1 pid
  [[ -f "$NODE_DIR/pids/$name" ]] || return 0
  pid=$(cat "$NODE_DIR/pids/$name")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    local deadline=$((SECONDS + 15))
    while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.2; done
    kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$NODE_DIR/pids/$name"
}

# -- host -------------------------------------------------------------------------------------------

ensure_packages() {
  local missing=() command package
  for entry in containerd:containerd runc:runc iptables:iptables conntrack:conntrack \
    buildah:buildah debootstrap:debootstrap ip:iproute2 socat:socat ethtool:ethtool; do
    command=${entry%%:*} package=${entry#*:}
    command -v "$command" >/dev/null || missing+=("$package")
  done
  ((${#missing[@]} == 0)) && return
  log "installing Debian packages: ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" >&2 ||
    { apt-get update >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" >&2; }
}

host_ip() { ip -4 route get 1.1.1.1 | sed -n 's/.* src \([0-9.]*\).*/\1/p'; }
outward_interface() { ip -4 route get 1.1.1.1 | sed -n 's/.* dev \([^ ]*\).*/\1/p'; }

setup_host_network() {
  mkdir -p "$NODE_DIR"
  [[ -f "$NODE_DIR/ip_forward.orig" ]] || sysctl -n net.ipv4.ip_forward >"$NODE_DIR/ip_forward.orig"
  sysctl -qw net.ipv4.ip_forward=1
  modprobe br_netfilter 2>/dev/null || true
  sysctl -qw net.bridge.bridge-nf-call-iptables=1 2>/dev/null || true
  local interface; interface=$(outward_interface)
  echo "$interface" >"$NODE_DIR/outward_interface"
  # Pod and Service addresses must never leave the machine. In mangle POSTROUTING the packet has
  # already been routed and DNAT-ed by kube-proxy, and not yet masqueraded.
  local range
  for range in "$CLUSTER_CIDR" "$SERVICE_CIDR"; do
    for direction in -s -d; do
      iptables -t mangle -C POSTROUTING -o "$interface" "$direction" "$range" -m comment \
        --comment "$RULE_COMMENT" -j DROP 2>/dev/null ||
        iptables -t mangle -A POSTROUTING -o "$interface" "$direction" "$range" -m comment \
          --comment "$RULE_COMMENT" -j DROP
    done
  done
}

restore_host_network() {
  local interface range
  if [[ -f "$NODE_DIR/outward_interface" ]]; then
    interface=$(cat "$NODE_DIR/outward_interface")
    for range in "$CLUSTER_CIDR" "$SERVICE_CIDR"; do
      for direction in -s -d; do
        while iptables -t mangle -D POSTROUTING -o "$interface" "$direction" "$range" -m comment \
          --comment "$RULE_COMMENT" -j DROP 2>/dev/null; do :; done
      done
    done
  fi
  remove_kube_chains
  ip link delete "$CNI_BRIDGE" 2>/dev/null || true
  ip link delete kube-ipvs0 2>/dev/null || true
  if [[ -f "$NODE_DIR/ip_forward.orig" ]]; then
    sysctl -qw "net.ipv4.ip_forward=$(cat "$NODE_DIR/ip_forward.orig")"
  fi
}

remove_kube_chains() {
  # kube-proxy's and the CNI plugins' chains and every rule that jumps to one: the table is
  # restored without them, in one step, and everything else in it as it was.
  local table pattern='^:(KUBE|CNI)-|^-A (KUBE|CNI)-|-j (KUBE|CNI)-'
  for table in filter nat mangle; do
    iptables-save -t "$table" | grep -vE "$pattern" | iptables-restore -T "$table"
  done
}

# -- certificates and kubeconfigs ----------------------------------------------------------------

issue_cert() {  # <name> <subject> <extensions> [<CA>]: a certificate signed by <CA> (default: ca)
  local name=$1 subject=$2 extensions=$3 ca=${4:-ca} pki=$NODE_DIR/pki
  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "$subject" \
    -keyout "$pki/$name.key" -out "$pki/$name.csr" 2>/dev/null
  openssl x509 -req -in "$pki/$name.csr" -CA "$pki/$ca.crt" -CAkey "$pki/$ca.key" -CAcreateserial \
    -days 365 -extfile <(printf '%s\n' "$extensions") -out "$pki/$name.crt" 2>/dev/null
  rm -f "$pki/$name.csr"
}

make_ca() {  # <name> <common name>: a self-signed CA
  openssl req -x509 -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 365 \
    -subj "/CN=$2" -keyout "$NODE_DIR/pki/$1.key" -out "$NODE_DIR/pki/$1.crt" 2>/dev/null
}

write_kubeconfig() {  # <name>: a kubeconfig with the client certificate <name>.crt
  local name=$1 pki=$NODE_DIR/pki
  cat >"$NODE_DIR/$name.kubeconfig" <<YAML
apiVersion: v1
kind: Config
clusters:
- name: torchjob-node
  cluster: {server: "https://$HOST_IP:$APISERVER_PORT", certificate-authority: "$pki/ca.crt"}
users:
- name: $name
  user: {client-certificate: "$pki/$name.crt", client-key: "$pki/$name.key"}
contexts:
- name: $name@torchjob-node
  context: {cluster: torchjob-node, user: $name}
current-context: $name@torchjob-node
YAML
}

make_pki() {
  local pki=$NODE_DIR/pki client='basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth'
  [[ -f "$pki/done" ]] && return
  mkdir -p "$pki"
  make_ca ca torchjob-node-ca
  issue_cert apiserver "/CN=kube-apiserver" "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=IP:$HOST_IP,IP:127.0.0.1,IP:$KUBERNETES_SERVICE_IP,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
  issue_cert kubelet-serving "/CN=$NODE_NAME" "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=IP:$HOST_IP,DNS:$NODE_NAME"
  issue_cert admin "/O=system:masters/CN=torchjob-node-admin" "$client"
  issue_cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" "$client"
  issue_cert controller-manager "/CN=system:kube-controller-manager" "$client"
  issue_cert scheduler "/CN=system:kube-scheduler" "$client"
  issue_cert kubelet "/O=system:nodes/CN=system:node:$NODE_NAME" "$client"
  issue_cert kube-proxy "/CN=system:kube-proxy" "$client"
  openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$pki/sa.key" 2>/dev/null
  openssl pkey -in "$pki/sa.key" -pubout -out "$pki/sa.pub"
  local name
  for name in admin controller-manager scheduler kubelet kube-proxy; do write_kubeconfig "$name"; done
  touch "$pki/done"
}

make_front_proxy_pki() {
  # The aggregation layer's: the API server proxies metrics.k8s.io to metrics-server with this
  # client certificate and the user in request headers, which metrics-server believes only from a
  # certificate of this CA. A CA of its own, as kubeadm does, so that no client certificate of the
  # cluster's CA can assert a user in headers. Separate from make_pki: a node made before has one.
  local pki=$NODE_DIR/pki
  [[ -f "$pki/front-proxy-client.crt" ]] && return
  make_ca front-proxy-ca torchjob-node-front-proxy-ca
  issue_cert front-proxy-client "/CN=front-proxy-client" 'basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth' front-proxy-ca
}

# -- components -----------------------------------------------------------------------------------

start_containerd() {
  pid_alive containerd && return
  mkdir -p "$RUN_DIR" "$CONTAINERD_ROOT" "$NODE_DIR/cni/net.d"
  write_cni_config
  cat >"$NODE_DIR/containerd.toml" <<TOML
version = 2
root = "$CONTAINERD_ROOT"
state = "$RUN_DIR/containerd"
[grpc]
  address = "$CONTAINERD_SOCKET"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  # No CAP_SYS_RESOURCE here: a negative oom_score_adj cannot be set, even by root.
  restrict_oom_score_adj = true
  enable_unprivileged_ports = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$CNI_DIR"
    conf_dir = "$NODE_DIR/cni/net.d"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
TOML
  start_process containerd containerd --config "$NODE_DIR/containerd.toml"
  wait_for "containerd answering" containerd ctr --address "$CONTAINERD_SOCKET" version
}

write_cni_config() {
  cat >"$NODE_DIR/cni/net.d/10-torchjob.conflist" <<JSON
{
  "cniVersion": "1.0.0",
  "name": "torchjob-node",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$CNI_BRIDGE",
      "isGateway": true,
      "ipMasq": true,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "$POD_CIDR"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
JSON
}

start_etcd() {
  pid_alive etcd && return
  start_process etcd "$ETCD_DIR/etcd" --name torchjob-node --data-dir "$NODE_DIR/etcd" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "torchjob-node=http://127.0.0.1:$ETCD_PEER_PORT" \
    --unsafe-no-fsync --log-level warn
  wait_for "etcd healthy" etcd curl -sf "http://127.0.0.1:$ETCD_PORT/health"
}

# Kubernetes' own gang scheduling (PodGroup, scheduling.k8s.io/v1beta1) is beta in 1.37: the
# node serves it, so the chart's default (gang scheduling "auto") places every job whole.
FEATURE_GATES=GenericWorkload=true
RUNTIME_CONFIG=scheduling.k8s.io/v1beta1=true

start_apiserver() {
  local pki=$NODE_DIR/pki
  restart_if_changed kube-apiserver "$KUBE_DIR/kube-apiserver" \
    --bind-address=0.0.0.0 --advertise-address="$HOST_IP" --secure-port="$APISERVER_PORT" \
    --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
    --cert-dir="$NODE_DIR/apiserver-certs" \
    --tls-cert-file="$pki/apiserver.crt" --tls-private-key-file="$pki/apiserver.key" \
    --client-ca-file="$pki/ca.crt" \
    --kubelet-client-certificate="$pki/apiserver-kubelet-client.crt" \
    --kubelet-client-key="$pki/apiserver-kubelet-client.key" \
    --kubelet-preferred-address-types=InternalIP \
    --authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction \
    --service-cluster-ip-range="$SERVICE_CIDR" --allow-privileged=true \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="$pki/sa.pub" --service-account-signing-key-file="$pki/sa.key" \
    --enable-aggregator-routing=true \
    --requestheader-client-ca-file="$pki/front-proxy-ca.crt" \
    --requestheader-allowed-names=front-proxy-client \
    --requestheader-username-headers=X-Remote-User --requestheader-group-headers=X-Remote-Group \
    --requestheader-extra-headers-prefix=X-Remote-Extra- \
    --proxy-client-cert-file="$pki/front-proxy-client.crt" \
    --proxy-client-key-file="$pki/front-proxy-client.key" \
    --feature-gates="$FEATURE_GATES" --runtime-config="$RUNTIME_CONFIG" \
    --shutdown-watch-termination-grace-period=1s --v=1 || return 0
  wait_for "kube-apiserver ready" kube-apiserver kubectl_ get --raw /readyz
}

start_controller_manager() {
  pid_alive kube-controller-manager && return
  local pki=$NODE_DIR/pki
  start_process kube-controller-manager "$KUBE_DIR/kube-controller-manager" \
    --kubeconfig="$NODE_DIR/controller-manager.kubeconfig" \
    --authentication-kubeconfig="$NODE_DIR/controller-manager.kubeconfig" \
    --authorization-kubeconfig="$NODE_DIR/controller-manager.kubeconfig" \
    --leader-elect=false --controllers='*' \
    --service-account-private-key-file="$pki/sa.key" --root-ca-file="$pki/ca.crt" \
    --use-service-account-credentials=true \
    --cluster-signing-cert-file="$pki/ca.crt" --cluster-signing-key-file="$pki/ca.key" \
    --bind-address=127.0.0.1 --cert-dir="$NODE_DIR/controller-manager-certs" \
    --feature-gates="$FEATURE_GATES" --v=1
  wait_for "the default ServiceAccount" kube-controller-manager kubectl_ get serviceaccount default
}

start_scheduler() {
  pid_alive kube-scheduler && return
  start_process kube-scheduler "$KUBE_DIR/kube-scheduler" \
    --kubeconfig="$NODE_DIR/scheduler.kubeconfig" \
    --authentication-kubeconfig="$NODE_DIR/scheduler.kubeconfig" \
    --authorization-kubeconfig="$NODE_DIR/scheduler.kubeconfig" \
    --leader-elect=false --bind-address=127.0.0.1 --feature-gates="$FEATURE_GATES" --v=1
  wait_for "kube-scheduler healthy" kube-scheduler curl -skf https://127.0.0.1:10259/healthz
}

start_kubelet() {
  pid_alive kubelet && return
  local pki=$NODE_DIR/pki
  mkdir -p "$KUBELET_DIR"
  # Pods resolve through CoreDNS; the kubelet's own view of the host's resolver stays out of them.
  printf 'nameserver %s\n' "$DNS_IP" >"$NODE_DIR/pod-resolv.conf"
  cat >"$NODE_DIR/kubelet.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: "$pki/ca.crt"}
authorization: {mode: Webhook}
tlsCertFile: "$pki/kubelet-serving.crt"
tlsPrivateKeyFile: "$pki/kubelet-serving.key"
clusterDomain: cluster.local
clusterDNS: ["$DNS_IP"]
resolvConf: "$NODE_DIR/pod-resolv.conf"
containerRuntimeEndpoint: "unix://$CONTAINERD_SOCKET"
# The host runs cgroup v1 without systemd as the cgroup manager.
failCgroupV1: false
cgroupDriver: cgroupfs
# No CAP_SYS_RESOURCE: the default -999 cannot be set.
oomScoreAdj: 0
failSwapOn: false
# Our images cannot be pulled again once collected: never collect them for disk space.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%"}
maxPods: 250
serializeImagePulls: false
YAML
  start_process kubelet "$KUBE_DIR/kubelet" --config="$NODE_DIR/kubelet.yaml" \
    --kubeconfig="$NODE_DIR/kubelet.kubeconfig" --root-dir="$KUBELET_DIR" \
    --hostname-override="$NODE_NAME" --node-ip="$HOST_IP" --v=1
  wait_for "node $NODE_NAME Ready" kubelet kubectl_ wait --for=condition=Ready --timeout=2s "node/$NODE_NAME"
}

start_kube_proxy() {
  pid_alive kube-proxy && return
  cat >"$NODE_DIR/kube-proxy.yaml" <<YAML
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: "$NODE_DIR/kube-proxy.kubeconfig"}
mode: iptables
clusterCIDR: "$CLUSTER_CIDR"
hostnameOverride: "$NODE_NAME"
# No CAP_SYS_RESOURCE: the default -999 cannot be set.
oomScoreAdj: 0
# Leave the host's conntrack table size alone.
conntrack: {maxPerCore: 0}
YAML
  start_process kube-proxy "$KUBE_DIR/kube-proxy" --config="$NODE_DIR/kube-proxy.yaml" --v=1
  wait_for "kube-proxy healthy" kube-proxy curl -sf http://127.0.0.1:10256/healthz
}

deploy_coredns() {
  sed -e "s|@DNS_IP@|$DNS_IP|g" -e "s|@COREDNS_IMAGE@|$COREDNS_IMAGE|g" "$HERE/node/coredns.yaml" |
    kubectl_ apply -f - >/dev/null
  kubectl_ -n kube-system rollout status deployment/coredns --timeout="${STARTUP_TIMEOUT}s" >&2
}

apply_metrics_server() {
  sed -e "s|@METRICS_SERVER_IMAGE@|$METRICS_SERVER_IMAGE|g" "$HERE/node/metrics-server.yaml" |
    kubectl_ apply -f - >/dev/null
}

wait_for_metrics_server() {
  # Available once the API server reaches it through the aggregation layer; its first figures
  # follow a scrape or two later (--metric-resolution).
  kubectl_ -n kube-system rollout status deployment/metrics-server --timeout="${STARTUP_TIMEOUT}s" >&2
  kubectl_ wait --for=condition=Available --timeout="${STARTUP_TIMEOUT}s" \
    apiservice/v1beta1.metrics.k8s.io >&2
}

install_chart() {  # [<source tree> <image tag>]: by default this repository's chart and image
  local tree=${1:-$REPO} tag=${2:-$(cat "$IMAGES_DIR/torchjob.tag")}
  # Helm installs a chart's crds/ only once: this repository's PyTorchTrainingJob CRD is applied on
  # every run. Another tree's (an earlier commit's, tests/node/test_upgrade.py) is not: as `helm
  # upgrade`, going back leaves the newer CRD. Kubeflow's PyTorchJob CRD is a template of the
  # chart (kubeflow.enabled), which refuses one it did not install.
  if [[ $tree == "$REPO" ]]; then
    kubectl_ apply --server-side --force-conflicts \
      -f "$REPO/charts/torchjob/crds/batch.tensorstack.dev_pytorchtrainingjobs.yaml" >/dev/null
  fi
  "$HELM" upgrade --install torchjob "$tree/charts/torchjob" --namespace "$CHART_NAMESPACE" \
    --create-namespace --kubeconfig "$KUBECONFIG_ADMIN" --values "$tree/hack/node/values.yaml" \
    --set image.repository="$TORCHJOB_IMAGE_REPOSITORY" --set image.tag="$tag" \
    --wait --timeout "${STARTUP_TIMEOUT}s" >&2
}

print_usage() {
  cat >&2 <<TEXT
[node] up: node $NODE_NAME Ready, CoreDNS serving cluster.local, metrics-server serving
  metrics.k8s.io (kubectl top), the chart installed in $CHART_NAMESPACE.
  export KUBECONFIG=$KUBECONFIG_ADMIN
  export PATH=$KUBE_DIR:\$PATH        # kubectl $KUBE_VERSION
  kubectl get nodes,pods -A
  kubectl apply -f examples/mnist-ddp/job.yaml   # or: make demo-cluster
Stop it with: make node-down
TEXT
}

# -- down -------------------------------------------------------------------------------------------

remove_sandboxes() {
  # Whatever the kubelet left: stop and remove every task and container, then the CNI state.
  pid_alive containerd || return 0
  local id
  for id in $(ctr_ tasks ls -q 2>/dev/null); do ctr_ tasks kill -s SIGKILL "$id" 2>/dev/null || true; done
  sleep 1
  for id in $(ctr_ tasks ls -q 2>/dev/null); do ctr_ tasks delete -f "$id" 2>/dev/null || true; done
  for id in $(ctr_ containers ls -q 2>/dev/null); do ctr_ containers delete "$id" 2>/dev/null || true; done
}

remove_mounts() {
  local mount_point
  # Deepest first, so that nested mounts come off before their parents.
  for mount_point in $(awk '{print $2}' /proc/mounts | grep -E "^($KUBELET_DIR|$RUN_DIR|$NODE_DIR|/run/netns/cni-)" | sort -r); do
    umount -l "$mount_point" 2>/dev/null || true
  done
  local netns
  for netns in $(ip netns list 2>/dev/null | awk '/^cni-/{print $1}'); do ip netns delete "$netns" 2>/dev/null || true; done
}

node_down() {
  [[ -d "$NODE_DIR" ]] || { log "not up"; return 0; }
  local name
  for name in kube-proxy kubelet; do stop_process "$name"; done
  remove_sandboxes
  for name in kube-scheduler kube-controller-manager kube-apiserver containerd etcd; do stop_process "$name"; done
  # containerd-shim processes outlive containerd; any left belong to sandboxes we just removed.
  pkill -KILL -f "containerd-shim-runc-v2 -namespace k8s.io -id .* -address $CONTAINERD_SOCKET" 2>/dev/null || true
  remove_mounts
  restore_host_network
  rm -rf "$NODE_DIR" "$RUN_DIR"
  log "down: processes stopped, network rules, mounts and sandboxes removed (logs kept in $LOG_DIR)"
}

# -- main -------------------------------------------------------------------------------------------

node_is_up() {
  local name
  for name in "${COMPONENTS[@]}"; do pid_alive "$name" || return 1; done
  kubectl_ wait --for=condition=Ready --timeout=5s "node/$NODE_NAME" >/dev/null 2>&1
}

build_binaries() {
  ensure_packages
  "$HERE/build-control-plane.sh" build-node
  "$HERE/build-node.sh" build
  "$HERE/install-helm.sh" install
  load_build_dirs
}

build_everything() {  # the binaries and the images; containerd runs only while images are made
  build_binaries
  [[ $EUID -eq 0 ]] || die "needs root (the image store is containerd's)"
  local started=false
  if ! pid_alive containerd; then
    mkdir -p "$NODE_DIR" "$LOG_DIR"
    start_containerd
    started=true
  fi
  "$HERE/node-images.sh" all
  if $started && ! pid_alive kubelet; then
    stop_process containerd
    rm -rf "$NODE_DIR" "$RUN_DIR"
  fi
}

node_up() {
  [[ $EUID -eq 0 ]] || die "needs root (network rules, mounts, container sandboxes)"
  build_binaries
  if [[ -d "$NODE_DIR" ]] && ! node_is_up; then
    log "a node that is not whole was found: taking it down first"
    node_down
    load_build_dirs
  fi
  HOST_IP=$(host_ip)
  [[ -n $HOST_IP ]] || die "no IPv4 address with a default route"
  mkdir -p "$NODE_DIR" "$LOG_DIR"
  echo "$HOST_IP" >"$NODE_DIR/host_ip"
  setup_host_network
  make_pki
  make_front_proxy_pki
  start_containerd
  "$HERE/node-images.sh" all
  start_etcd
  start_apiserver
  start_controller_manager
  start_scheduler
  start_kubelet
  start_kube_proxy
  apply_metrics_server
  deploy_coredns
  install_chart
  wait_for_metrics_server
  print_usage
}

main() {
  case "${1:-}" in
    up) node_up ;;
    build) build_everything ;;
    down) load_build_dirs; node_down ;;
    status) load_build_dirs; node_is_up ;;
    chart) load_build_dirs; install_chart "${@:2}" ;;
    env) load_build_dirs; printf 'export KUBECONFIG=%s\nexport PATH=%s:$PATH\n' "$KUBECONFIG_ADMIN" "$KUBE_DIR" ;;
    *) echo "usage: $0 build|up|down|status|env|chart [<source tree> <image tag>]" >&2; exit 2 ;;
  esac
}

# Sourced (by a test or another script), it only defines its functions.
if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then main "$@"; fi
