"""Started by torchrun in every process of a job: checks the environment torchrun gives the
process, joins the process group with it and prints what it saw as one `CHECK {json}` line."""

import json
import os
import sys

import torch
import torch.distributed as dist

REQUIRED = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")

missing = [name for name in REQUIRED if not os.environ.get(name)]
if missing:
    print(f"CHECK-FAILED missing {missing}", flush=True)
    sys.exit(3)
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
total = torch.tensor([float(rank)])
dist.all_reduce(total)
report = {
    "rank": int(os.environ["RANK"]),
    "world_size": int(os.environ["WORLD_SIZE"]),
    "local_rank": int(os.environ["LOCAL_RANK"]),
    "local_world_size": int(os.environ["LOCAL_WORLD_SIZE"]),
    "group_rank": int(os.environ["GROUP_RANK"]),
    "master_addr": os.environ["MASTER_ADDR"],
    "master_port": os.environ["MASTER_PORT"],
    "role": os.environ.get("ROLE_NAME"),
    "max_restarts": os.environ.get("TORCHELASTIC_MAX_RESTARTS"),
    "run_id": os.environ.get("TORCHELASTIC_RUN_ID"),
    "group_world": world,
    "group_rank_sum": total.item(),
}
# One write of the whole line: the processes of a replica share its stdout pipe, and an
# unbuffered print() writes the text and its newline separately, so lines could interleave.
# A pipe write of at most PIPE_BUF bytes is never split.
os.write(sys.stdout.fileno(), ("CHECK " + json.dumps(report) + "\n").encode())
dist.destroy_process_group()
sys.exit(0 if rank == report["rank"] and total.item() == world * (world - 1) / 2 else 4)
