"""Run in every replica of a plain-python job: `python -c <this> STOP_FILE`.

Joins the job's gloo process group through the variables the operator sets (torch's env://
rendezvous), then does an all_reduce every half second until the file STOP_FILE exists (on a
volume every replica mounts: rank 0 looks, and tells the others in the same all_reduce), and
exits 0. So the job runs for as long as its test needs, however fast the machine. Rank 0 reports
its progress every few steps where the pod was given Kubeflow Trainer's variables: a percentage
that grows with the steps and stays under 100; a report the endpoint does not take (it may be
restarting) is printed and skipped. The example image's torch; nothing else."""

from __future__ import annotations

import json
import os
import ssl
import sys
import time
import urllib.request
from datetime import timedelta

import torch
import torch.distributed as dist

STEP_SECONDS = 0.5
REPORT_EVERY = 4
# A lost peer whose connection never closes fails a collective after this long; a replica also
# waits this long for the master's store when it starts first on a busy machine.
COLLECTIVE_TIMEOUT = timedelta(seconds=300)


def report(step: int) -> None:
    url = os.environ.get("KUBEFLOW_TRAINER_SERVER_URL")
    if not url:
        return
    with open(os.environ["KUBEFLOW_TRAINER_SERVER_TOKEN"]) as token_file:
        token = token_file.read().strip()
    status = {"progressPercentage": min(99, 1 + step // REPORT_EVERY)}
    request = urllib.request.Request(
        url, data=json.dumps({"trainerStatus": status}).encode(), method="POST"
    )
    request.add_header("Content-Type", "application/json")
    request.add_header("Authorization", f"Bearer {token}")
    context = ssl.create_default_context(cafile=os.environ["KUBEFLOW_TRAINER_SERVER_CA_CERT"])
    try:
        with urllib.request.urlopen(request, context=context, timeout=5):
            pass
    except OSError as error:
        print(f"report at step {step} not taken: {error}", flush=True)


def main() -> None:
    stop_file = sys.argv[1]
    dist.init_process_group("gloo", timeout=COLLECTIVE_TIMEOUT)
    rank = dist.get_rank()
    print(f"rank {rank} of {dist.get_world_size()}", flush=True)
    step = 0
    while True:
        step += 1
        stop = torch.tensor([1.0 if rank == 0 and os.path.exists(stop_file) else 0.0])
        dist.all_reduce(stop)
        if stop.item() > 0:
            break
        if rank == 0 and step % REPORT_EVERY == 0:
            report(step)
        time.sleep(STEP_SECONDS)
    dist.barrier()  # no rank leaves (and closes the master's store) before the others are done
    dist.destroy_process_group()
    print(f"stopped after step {step}", flush=True)


main()
