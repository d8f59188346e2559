"""A gang restart in place against one by recreation, on the real node: from a worker's
SIGKILL to every rank training again.

The node of `make node-up` with the chart installed (nothing is measured, with a line saying so,
when it is not up; the kill needs root). The job
(tests/support/restarts.py): a plain gloo PyTorchTrainingJob of a master and two workers, one
all_reduce a second (no torchrun: a gang restart), its restart delay 0
(`restart-backoff-seconds`), made to restart in place or, with `restart-in-place: "false"`, by
recreating its pods. Each round runs one job of each, one after the other: once every replica
has done its third step, worker 1's training container is SIGKILLed from the host (exit code
137), and the clock runs until, in one look (every 0.2 s), every replica's training container
started after the kill and logged its first step. The job is then deleted.

Printed: each time, the medians and their ratio (in place over recreation). The exit status
says nothing about them.

    .venv/bin/python tests/bench/in_place.py              # 3 rounds
    .venv/bin/python tests/bench/in_place.py --rounds 1
"""

from __future__ import annotations

import argparse
import statistics
import sys
import uuid
from pathlib import Path

TESTS_DIR = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS_DIR))

from support.node import Node, node_is_up  # noqa: E402
from support.restarts import (  # noqa: E402
    gloo_job,
    kill_training,
    seconds_to_train_again,
    training_container,
    wait_stepping,
)

REPLICAS = 3
STEPS = 120  # more than a round needs: the job is deleted once timed
CONTAINER = training_container(kubeflow=False)


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--rounds", type=int, default=3, help="jobs of each kind, alternated")
    return p.parse_args()


def one_restart(node: Node, namespace: str, name: str, in_place: bool) -> float:
    node.apply(namespace, gloo_job(node.example_image, name, STEPS, in_place=in_place))
    try:
        wait_stepping(node, namespace, name, CONTAINER, REPLICAS, 3)
        killed_at = kill_training(node, namespace, f"{name}-worker-1", CONTAINER)
        return seconds_to_train_again(node, namespace, name, CONTAINER, REPLICAS, killed_at)
    finally:
        node.kubectl("delete", "pytorchtrainingjob", name, "-n", namespace, "--wait=true")


def main() -> None:
    args = parse()
    if not node_is_up():
        print("the node is not up (make node-up): nothing measured")
        return
    node = Node.locate()
    namespace = f"bench-in-place-{uuid.uuid4().hex[:6]}"
    node.kubectl("create", "namespace", namespace)
    times: dict[bool, list[float]] = {True: [], False: []}
    try:
        for round_ in range(args.rounds):
            for in_place in (True, False):
                name = f"{'in-place' if in_place else 'recreate'}-{round_}"
                seconds = one_restart(node, namespace, name, in_place)
                times[in_place].append(seconds)
                how = "in place  " if in_place else "recreation"
                print(f"round {round_ + 1} {how}: {seconds:.1f} s", flush=True)
    finally:
        node.kubectl("delete", "namespace", namespace, "--wait=false")
    kept, recreated = (statistics.median(times[k]) for k in (True, False))
    print(f"median: in place {kept:.1f} s, recreation {recreated:.1f} s")
    print(f"ratio:  {kept / recreated:.2f}x (in place over recreation)")


if __name__ == "__main__":
    main()
