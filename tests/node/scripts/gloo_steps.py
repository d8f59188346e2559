"""Run in every replica of a plain-python job (no torchrun): `python -c <this> STEPS SECONDS`.

Joins the job's gloo process group through the variables the operator sets (MASTER_ADDR,
MASTER_PORT, WORLD_SIZE, RANK: torch's env:// rendezvous reads them), then does STEPS all_reduces
of a one, SECONDS apart, printing `step k` after each; exits 0 once every rank has done them all.
A peer that disappears makes a collective fail (or time out) and the process exit non-zero, as a
real training script does. The example image's torch; nothing else."""

from __future__ import annotations

import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

# A lost peer whose connection never closes fails a collective after this long, not gloo's
# default of 30 minutes.
COLLECTIVE_TIMEOUT = timedelta(seconds=60)


def main() -> None:
    steps, seconds = int(sys.argv[1]), float(sys.argv[2])
    dist.init_process_group("gloo", timeout=COLLECTIVE_TIMEOUT)
    world = dist.get_world_size()
    print(f"rank {dist.get_rank()} of {world} at {os.environ['MASTER_ADDR']}", flush=True)
    for step in range(1, steps + 1):
        total = torch.ones(1)
        dist.all_reduce(total)
        assert int(total.item()) == world, total
        print(f"step {step}", flush=True)
        time.sleep(seconds)
    dist.barrier()  # no rank leaves (and closes the master's store) before the others are done
    dist.destroy_process_group()
    print("done", flush=True)


main()
