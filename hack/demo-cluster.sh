#!/usr/bin/env bash
# On the real node (`make node-up`): applies examples/mnist-ddp/job.yaml with kubectl in its own
# namespace, waits for the job to end, and prints the test accuracy from the master's logs.
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/.." && pwd)"
# shellcheck source=hack/node/common.sh
source "$HERE/node/common.sh"
load_build_dirs

NAMESPACE=torchjob-demo
JOB=mnist-ddp
# The master is replica 0 of the job's only replica spec (type worker).
MASTER_POD=$JOB-worker-0
TIMEOUT=1800

log() { printf '[demo] %s\n' "$*" >&2; }

kubectl_ create namespace "$NAMESPACE" --dry-run=client -o yaml | kubectl_ apply -f - >/dev/null
kubectl_ -n "$NAMESPACE" delete ptj "$JOB" --ignore-not-found --wait >/dev/null
kubectl_ -n "$NAMESPACE" apply -f "$REPO/examples/mnist-ddp/job.yaml"
log "waiting for $JOB (kubectl -n $NAMESPACE get ptj,pods to watch it)"
deadline=$((SECONDS + TIMEOUT)) phase="" shown=""
until [[ $phase == Succeeded || $phase == Failed ]]; do
  ((SECONDS < deadline)) || { log "not finished after ${TIMEOUT}s"; exit 1; }
  sleep 5
  state=$(kubectl_ -n "$NAMESPACE" get ptj "$JOB" -o jsonpath='{.status.phase} {.status.trainerStatus.progressPercentage} {.status.trainerStatus.estimatedRemainingSeconds}')
  read -r phase percent eta <<<"$state"
  # What train.py last reported (status.trainerStatus; kubectl get shows it as PROGRESS and ETA).
  if [[ -n ${percent:-} && "$percent $eta" != "$shown" ]]; then
    log "progress ${percent}%, about ${eta:-?}s left"
    shown="$percent $eta"
  fi
done
kubectl_ -n "$NAMESPACE" get ptj "$JOB"
accuracy=$(kubectl_ -n "$NAMESPACE" logs "$MASTER_POD" -c python | sed -n 's/.*test accuracy \([0-9.]*\).*/\1/p' | tail -n1)
if [[ $phase != Succeeded || -z $accuracy ]]; then
  log "$JOB ended $phase; the master's last lines:"
  kubectl_ -n "$NAMESPACE" logs "$MASTER_POD" -c python --tail=30 >&2 || true
  exit 1
fi
echo "test accuracy: $accuracy"
