"""A plain training loop that reports its progress with the Kubeflow SDK.

`update_trainjob_status` posts to the job's status endpoint when KUBEFLOW_TRAINER_SERVER_URL is
set (and does nothing otherwise). It drops a report made within 5 s of the last one it sent, so
the loop's steps (`--step_seconds` each) get one through every few steps, and the last step waits
its turn: the final report, 100 %, is always sent.
"""

from __future__ import annotations

import argparse
import math
import time

from kubeflow.trainer import update_trainjob_status

THROTTLE = 5.0  # the SDK's least time between two reports


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--step_seconds", type=float, default=1.0)
    args = parser.parse_args()
    started = time.monotonic()
    last_sent: float | None = None
    for step in range(1, args.steps + 1):
        time.sleep(args.step_seconds)  # the work of one step
        if step == args.steps and last_sent is not None:
            time.sleep(max(0.0, last_sent + THROTTLE - time.monotonic()))
        loss = 2.0 * math.exp(-step / 4)
        elapsed = time.monotonic() - started
        remaining = round(elapsed / step * (args.steps - step))
        sent = update_trainjob_status(
            progress_percent=100 if step == args.steps else step * 100 // args.steps,
            estimated_remaining_seconds=remaining,
            metrics={"loss": round(loss, 4), "step": step},
        )
        last_sent = time.monotonic() if sent else last_sent
        print(f"step {step}/{args.steps} loss {loss:.4f} reported {sent}", flush=True)


if __name__ == "__main__":
    main()
