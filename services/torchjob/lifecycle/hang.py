"""A diagnosis's summary (lifecycle/diagnosis.py): from each pod's report, which ranks wait in
which collective, and which rank is elsewhere and where, on which node. Pure.

A report is what the pod's restart agent printed last for the diagnosis
(render/agent/restart_agent.py): for each training process of the pod, its rank, whether it
answered, its torch.distributed backend and its main thread's innermost frames. It comes from
the tenant's own image: every field is read as untrusted text, bounded, on one line.

A process waits in a collective when a frame of its main thread, in torch.distributed or in
DistributedDataParallel, is named for one (`all_reduce`, `barrier`,
`_distributed_broadcast_coalesced`, ...), or in backward under a process group (where
DistributedDataParallel all-reduces the gradients). One that did not answer is stopped or holds
Python's lock. Any other is elsewhere, at its innermost frame of the job's own code. The ranks
that are elsewhere or silent come first: they are the ones the others wait for. Of a pod's
processes, the ranks torchrun started (LOCAL_RANK set) are summarized, else those with a RANK.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

import orjson

from torchjob.lifecycle.diagnosis import PodSeen
from torchjob.lifecycle.terminated import one_line
from torchjob.render.agent.restart_agent import REPORT_PREFIX

MAX_MESSAGE: Final = 1024
MAX_NAMED: Final = 4  # ranks named in one group; the rest are counted
COLLECTIVE_PLACES: Final = ("/torch/distributed/", "/torch/nn/parallel/")
COLLECTIVE_WORDS: Final = (
    "all_reduce",
    "allreduce",
    "all_gather",
    "allgather",
    "reduce_scatter",
    "all_to_all",
    "broadcast",
    "barrier",
    "gather",
    "scatter",
    "reduce",
    "send",
    "recv",
)
BACKWARD: Final = frozenset({"_engine_run_backward", "run_backward", "backward"})
LIBRARY_PARTS: Final = ("/site-packages/", "/dist-packages/", "/lib/python3")
SILENT: Final = "did not answer (stopped, or holding Python's lock)"


def report_in(log_tail: str, number: int) -> dict[str, Any] | None:
    """The report of diagnosis `number` in the tail of an agent's log; None when absent."""
    for line in reversed(log_tail.splitlines()):
        if not line.startswith(REPORT_PREFIX):
            continue
        try:
            report = orjson.loads(line[len(REPORT_PREFIX) :])
        except orjson.JSONDecodeError:
            continue
        if isinstance(report, dict) and report.get("number") == number:
            return report
    return None


def summarize(pods: Iterable[PodSeen], reports: Mapping[str, dict[str, Any] | None]) -> str:
    """The summary of a diagnosis of `pods`, from their reports by pod name."""
    groups: dict[str, list[str]] = {}
    for pod in pods:
        for rank, state in _states(pod, reports.get(pod.name)):
            groups.setdefault(state, []).append(f"{rank} ({pod.replica} on {pod.node or '?'})")
    if not groups:
        return "no pod was asked"
    ordered = sorted(groups.items(), key=lambda item: item[0].startswith("waits in"))
    parts = [f"{_named(ranks)} {state}" for state, ranks in ordered]
    return one_line("; ".join(parts), MAX_MESSAGE)


def _states(pod: PodSeen, report: dict[str, Any] | None) -> list[tuple[str, str]]:
    if report is None:
        return [(pod.name, "sent no report (its agent did not answer)")]
    processes = [p for p in report.get("processes") or [] if isinstance(p, dict)]
    if not processes:
        return [(pod.name, "has no Python process that loaded the diagnosis hook")]
    parents = [p for p in processes if not p.get("child")] or processes
    ranked = (
        [p for p in parents if p.get("localRank") is not None]
        or [p for p in parents if p.get("rank") is not None]
        or parents
    )
    return [(_rank(p), _state(p)) for p in ranked]


def _rank(process: dict[str, Any]) -> str:
    rank = process.get("rank")
    return f"rank {_text(rank)}" if rank is not None else f"pid {_text(process.get('pid'))}"


def _state(process: dict[str, Any]) -> str:
    if not process.get("answered"):
        return SILENT
    frames = [f for f in process.get("main") or [] if isinstance(f, list) and len(f) == 3]
    backend = process.get("backend")
    over = f" ({_text(backend)})" if backend else ""
    at = _own_frame(frames)
    where = f" at {at}" if at else ""
    for path, _line, function in frames:
        if _collective(str(path), str(function)):
            return f"waits in {_text(function)}{over}{where}"
    if backend and any(f[2] in BACKWARD and "/torch/" in str(f[0]) for f in frames):
        return f"waits in backward's gradient all_reduce{over}{where}"
    innermost = _frame_text(frames[0]) if frames else "no frame"
    return f"is elsewhere: {at or innermost}"


def _collective(path: str, function: str) -> bool:
    return any(place in path for place in COLLECTIVE_PLACES) and any(
        word in function for word in COLLECTIVE_WORDS
    )


def _own_frame(frames: list[list[Any]]) -> str | None:
    """The innermost frame of the job's own code (not of an installed library)."""
    for frame in frames:
        if not any(part in str(frame[0]) for part in LIBRARY_PARTS):
            return _frame_text(frame)
    return None


def _frame_text(frame: list[Any]) -> str:
    path, line, function = frame
    return f"{_text(str(path).rsplit('/', 1)[-1])}:{_text(line)} in {_text(function)}"


def _named(ranks: list[str]) -> str:
    named = ", ".join(ranks[:MAX_NAMED])
    more = len(ranks) - MAX_NAMED
    return f"{named} and {more} more" if more > 0 else named


def _text(value: Any) -> str:
    return one_line(str(value), 120)
