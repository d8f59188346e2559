"""A tiny DistributedDataParallel loop: `--steps` steps of `--sleep` seconds each; rank 0 prints
every step, and exits with `--exit-code` at step `--fail-at` when asked."""

import argparse
import sys
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=20)
parser.add_argument("--sleep", type=float, default=0.2)
parser.add_argument("--fail-at", type=int, default=-1)
parser.add_argument("--exit-code", type=int, default=1)
args = parser.parse_args()

torch.set_num_threads(1)
dist.init_process_group("gloo")
rank = dist.get_rank()
model = DistributedDataParallel(nn.Linear(4, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(args.steps):
    loss = model(torch.randn(8, 4)).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if rank == 0:
        print(f"step {step} of {args.steps} in a world of {dist.get_world_size()}", flush=True)
        if step == args.fail_at:
            sys.exit(args.exit_code)
    time.sleep(args.sleep)
dist.destroy_process_group()
if rank == 0:
    print("finished", flush=True)
