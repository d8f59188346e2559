"""Run in a replica pod: `python -c <this> STEPS`. Reports progress to the job's status the
Kubeflow way for STEPS steps, a second apart, then hangs forever, as a training whose collective
never returns: the process lives, and no progress comes.

The protocol is Kubeflow Trainer's, as examples/mnist-ddp/train.py's ProgressReporter speaks it:
POST {"trainerStatus": ...} to $KUBEFLOW_TRAINER_SERVER_URL with the bearer token read from the
file $KUBEFLOW_TRAINER_SERVER_TOKEN names, the server checked against
$KUBEFLOW_TRAINER_SERVER_CA_CERT. Standard library only: runs in the base image."""

from __future__ import annotations

import json
import os
import ssl
import sys
import time
import urllib.error
import urllib.request
from datetime import UTC, datetime


def report(step: int, steps: int) -> int:
    """POSTs one report; the HTTP status the endpoint answered."""
    with open(os.environ["KUBEFLOW_TRAINER_SERVER_TOKEN"]) as file:
        token = file.read().strip()
    body = {
        "trainerStatus": {
            "progressPercentage": step * 10 // steps,  # never near done: it hangs
            "estimatedRemainingSeconds": 600,
            "metrics": [{"name": "step", "value": str(step)}],
            "lastUpdatedTime": datetime.now(UTC).isoformat(),
        }
    }
    request = urllib.request.Request(
        os.environ["KUBEFLOW_TRAINER_SERVER_URL"],
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        method="POST",
    )
    context = ssl.create_default_context(cafile=os.environ["KUBEFLOW_TRAINER_SERVER_CA_CERT"])
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as error:
        return error.code


def main() -> None:
    steps = int(sys.argv[1])
    for step in range(1, steps + 1):
        print(f"step {step}: reported, HTTP {report(step, steps)}", flush=True)
        time.sleep(1)
    print("hanging", flush=True)
    while True:
        time.sleep(3600)


main()
