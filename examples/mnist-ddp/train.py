"""Handwritten digits with DistributedDataParallel, started by torchrun.

The data is scikit-learn's bundled digits set (1,797 8x8 images; nothing is downloaded), split
once with a fixed seed into train, validation and test sets. Every process trains on its
DistributedSampler shard; gloo on CPU, nccl on GPU. Rank 0 writes TensorBoard scalars
(train/loss, val/accuracy) and, at the end, the model and metrics.json to --log_dir.

Rank 0 also reports its progress (percentage, time left, loss, accuracy, epoch) to the job's
status when the job's endpoint is given (KUBEFLOW_TRAINER_SERVER_URL; see ProgressReporter).

A checkpoint is written after every epoch, by the first process of each replica (LOCAL_RANK 0)
to its own --log_dir. When the processes of the same job start again (same TORCHELASTIC_RUN_ID,
for example after a replica was lost and replaced), every rank resumes from the latest checkpoint
any of them holds (see `resume`): a replacement replica has none on its own filesystem. A new job
starts from scratch.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import ssl
import time
import urllib.error
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


class ProgressReporter:
    """Reports training progress to the job's status, as Kubeflow Trainer's clients do.

    The protocol (Kubeflow Trainer's, which torchjob serves too): POST
    `{"trainerStatus": {"progressPercentage": 0-100, "estimatedRemainingSeconds": n,
    "metrics": [{"name": ..., "value": "..."}], "lastUpdatedTime": RFC 3339}}` as JSON to
    $KUBEFLOW_TRAINER_SERVER_URL with `Authorization: Bearer <token>`, the token read from the
    file $KUBEFLOW_TRAINER_SERVER_TOKEN names (read each time: it is renewed), the server's
    certificate checked against $KUBEFLOW_TRAINER_SERVER_CA_CERT when set. 200 means written.
    Without the URL nothing is sent. At most one report every INTERVAL seconds, plus the last;
    a failure is printed once and training goes on.
    """

    INTERVAL = 5.0
    TIMEOUT = 5.0

    def __init__(self, enabled: bool, done: float = 0.0) -> None:
        self.url = os.environ.get("KUBEFLOW_TRAINER_SERVER_URL") if enabled else None
        self.started, self.done_at_start = time.monotonic(), done  # for the time left
        self.last_sent: float | None = None
        self.failed = False

    def due(self) -> bool:
        """Whether a report would be sent now (compute its metrics only then): the first at
        once, then one an interval after the last."""
        if self.url is None:
            return False
        return self.last_sent is None or time.monotonic() - self.last_sent >= self.INTERVAL

    def report(self, done: float, metrics: dict[str, float], final: bool = False) -> None:
        """`done`: the fraction of the whole training done (0 to 1); `final`: it has ended."""
        if self.url is None or not (final or self.due()):
            return
        self.last_sent = time.monotonic()
        status: dict[str, object] = {
            "progressPercentage": 100 if final else min(99, int(done * 100)),
            # A metric not known yet (NaN) is left out.
            "metrics": [
                {"name": k, "value": f"{v:.4g}"} for k, v in metrics.items() if not math.isnan(v)
            ],
            "lastUpdatedTime": datetime.now(UTC).isoformat(),
        }
        progressed = done - self.done_at_start
        if final or progressed > 0:
            elapsed = self.last_sent - self.started
            status["estimatedRemainingSeconds"] = (
                0 if final else round(elapsed * (1 - done) / progressed)
            )
        try:
            self._post({"trainerStatus": status})
        except Exception as error:  # reporting must never stop the training
            if not self.failed:
                print(f"progress report failed (training goes on): {_said(error)}", flush=True)
            self.failed = True

    def _post(self, body: dict[str, object]) -> None:
        token = Path(os.environ["KUBEFLOW_TRAINER_SERVER_TOKEN"]).read_text().strip()
        ca_file = os.environ.get("KUBEFLOW_TRAINER_SERVER_CA_CERT")
        request = urllib.request.Request(
            str(self.url),
            data=json.dumps(body).encode(),
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
            method="POST",
        )
        context = ssl.create_default_context(cafile=ca_file) if ca_file else None
        with urllib.request.urlopen(request, timeout=self.TIMEOUT, context=context):
            pass  # urlopen raises an HTTPError for any answer but a success


def _said(error: Exception) -> str:
    """The error, with the server's own message when it answered (a metav1.Status)."""
    if isinstance(error, urllib.error.HTTPError):
        try:
            return f"HTTP {error.code}: {json.loads(error.read())['message']}"
        except (ValueError, KeyError, TypeError, OSError):
            return f"HTTP {error.code}"
    return str(error)


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch_size", type=int, default=16, help="per process")
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--log_dir", default="runs", help="TensorBoard logs, model, metrics")
    return parser.parse_args()


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(16, 32, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        self.classify = nn.Sequential(
            nn.Flatten(), nn.Linear(32 * 4 * 4, 64), nn.ReLU(), nn.Linear(64, 10)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classify(self.features(x))


def datasets(seed: int) -> tuple[TensorDataset, TensorDataset, TensorDataset]:
    digits = load_digits()
    images = (digits.images / 16.0).astype(np.float32)[:, None, :, :]
    labels = digits.target.astype(np.int64)
    x_train, x_rest, y_train, y_rest = train_test_split(
        images, labels, test_size=0.3, random_state=seed, stratify=labels
    )
    x_val, x_test, y_val, y_test = train_test_split(
        x_rest, y_rest, test_size=0.5, random_state=seed, stratify=y_rest
    )

    def tensors(x: np.ndarray, y: np.ndarray) -> TensorDataset:
        return TensorDataset(torch.from_numpy(x), torch.from_numpy(y))

    return tensors(x_train, y_train), tensors(x_val, y_val), tensors(x_test, y_test)


def accuracy(model: nn.Module, data: TensorDataset, device: torch.device) -> float:
    """Each process scores its own slice of `data`; the counts are summed over all of them."""
    rank, world = dist.get_rank(), dist.get_world_size()
    x, y = data.tensors
    x, y = x[rank::world].to(device), y[rank::world].to(device)
    model.eval()
    with torch.no_grad():
        correct = (model(x).argmax(dim=1) == y).sum() if len(y) else torch.tensor(0)
    counts = torch.tensor([float(correct), float(len(y))], device=device)
    dist.all_reduce(counts)
    model.train()
    return float(counts[0] / counts[1])


def main() -> None:
    args = arguments()
    use_cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if use_cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if use_cuda:
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        torch.set_num_threads(1)  # several processes share this machine's cores
        device = torch.device("cpu")
    torch.manual_seed(args.seed)

    train, val, test = datasets(args.seed)
    sampler = DistributedSampler(train, num_replicas=world, rank=rank, shuffle=True, seed=args.seed)
    loader = DataLoader(train, batch_size=args.batch_size, sampler=sampler)
    model = DistributedDataParallel(Net().to(device), device_ids=[local_rank] if use_cuda else None)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    log_dir = Path(args.log_dir)
    checkpoint = log_dir / "checkpoint.pt"
    run_id = os.environ.get("TORCHELASTIC_RUN_ID", "")
    if local_rank == 0:
        log_dir.mkdir(parents=True, exist_ok=True)
    first_epoch = resume(checkpoint, run_id, model, optimizer)

    writer = None
    if rank == 0:
        from torch.utils.tensorboard import SummaryWriter

        writer = SummaryWriter(str(log_dir))
        print(
            f"training on {world} process(es), {'nccl/GPU' if use_cuda else 'gloo/CPU'}, "
            f"{len(train)} train / {len(val)} val / {len(test)} test images",
            flush=True,
        )

    loss_fn = nn.CrossEntropyLoss()
    steps_per_epoch = len(loader)
    total_steps, step = args.epochs * steps_per_epoch, (first_epoch - 1) * steps_per_epoch
    reporter = ProgressReporter(enabled=rank == 0, done=step / total_steps)
    train_loss, val_accuracy = math.nan, math.nan
    for epoch in range(first_epoch, args.epochs + 1):
        sampler.set_epoch(epoch)
        for group in optimizer.param_groups:  # cosine decay, a function of the epoch alone
            group["lr"] = args.lr * 0.5 * (1 + math.cos(math.pi * (epoch - 1) / args.epochs))
        total = torch.zeros(2, device=device)
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            count = torch.tensor(float(len(y)), device=device)
            total += torch.stack([loss.detach() * count, count])
            step += 1
            if reporter.due():  # the loss is read off the device only when it is reported
                metrics = {"loss": loss.item(), "accuracy": val_accuracy, "epoch": epoch}
                reporter.report(step / total_steps, metrics)
        dist.all_reduce(total)
        train_loss = float(total[0] / total[1])
        val_accuracy = accuracy(model, val, device)
        if local_rank == 0:  # one checkpoint per replica: each may be the one that survives
            save(checkpoint, run_id, epoch, model, optimizer)
        if writer is not None:
            writer.add_scalar("train/loss", train_loss, epoch)
            writer.add_scalar("val/accuracy", val_accuracy, epoch)
            writer.flush()
            print(
                f"epoch {epoch}/{args.epochs} train/loss {train_loss:.4f} "
                f"val/accuracy {val_accuracy:.4f}",
                flush=True,
            )

    test_accuracy = accuracy(model, test, device)
    if writer is not None:
        writer.close()
        torch.save(model.module.state_dict(), log_dir / "model.pt")
        metrics = {"test_accuracy": test_accuracy, "epochs": args.epochs, "world_size": world}
        (log_dir / "metrics.json").write_text(json.dumps(metrics))
        print(f"test accuracy {test_accuracy:.4f}", flush=True)
    final = {"loss": train_loss, "accuracy": val_accuracy, "test_accuracy": test_accuracy}
    reporter.report(1.0, {**final, "epoch": args.epochs}, final=True)
    # The model's DistributedDataParallel holds the process group and the work of its last
    # collectives: freed after the group is destroyed, the last of them can be released on one of
    # gloo's own threads, which then aborts the process at exit (SIGABRT, "terminate called
    # without an active exception"), failing the replica after its training succeeded.
    del model, optimizer
    gc.collect()
    dist.destroy_process_group()


def resume(path: Path, run_id: str, model: nn.Module, optimizer: torch.optim.Optimizer) -> int:
    """The epoch to start at, the same on every rank: after the latest epoch that any rank holds a
    checkpoint of (of this same job), else 1.

    Each replica reads its own filesystem: one that replaced a lost replica has no checkpoint
    while the others have theirs, and ranks starting at different epochs would run mismatched
    collectives. So the ranks tell each other their checkpoint's epoch, the lowest rank holding
    the latest sends that checkpoint to all, and every rank loads it. (With a volume that every
    replica mounts, they all read the same checkpoint and the broadcast changes nothing.)
    """
    state = load(path, run_id)
    epochs = [0] * dist.get_world_size()
    dist.all_gather_object(epochs, state["epoch"] if state else 0)
    latest = max(epochs)
    if latest == 0:
        return 1
    source = epochs.index(latest)  # the lowest rank holding it
    shared = [state if dist.get_rank() == source else None]
    dist.broadcast_object_list(shared, src=source)
    model.load_state_dict(shared[0]["model"])
    optimizer.load_state_dict(shared[0]["optimizer"])
    if dist.get_rank() == 0:
        print(f"resumed from epoch {latest} (checkpoint of rank {source})", flush=True)
    return latest + 1


def load(path: Path, run_id: str) -> dict[str, Any] | None:
    """This rank's checkpoint when it is this same job's, else None."""
    if not run_id or not path.exists():
        return None
    state: dict[str, Any] = torch.load(path, map_location="cpu")
    return state if state.get("run_id") == run_id else None


def save(
    path: Path, run_id: str, epoch: int, model: nn.Module, optimizer: torch.optim.Optimizer
) -> None:
    state = {
        "run_id": run_id,
        "epoch": epoch,
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
    }
    # Replicas sharing a volume write the same checkpoint: each through its own partial file.
    partial = path.with_suffix(f".{dist.get_rank()}.partial")
    torch.save(state, partial)
    partial.replace(path)  # never a half-written checkpoint


if __name__ == "__main__":
    main()
