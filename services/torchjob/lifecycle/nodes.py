"""Pods lost with their node: the decision, as a pure function of the nodes the reconciler's
cache shows and the job's pods. Pure.

A pod is lost with its node when the node does not exist (or is being deleted), or when its Ready
condition has not been True for the grace period (`--node-lost-grace`): the kubelet reports it
NotReady, or the node lifecycle controller set it Unknown because the kubelet stopped renewing
its lease. A lost pod is no failure of the job: it joins the pods stopped by others
(Round.preempted), so its replacement is not charged to backoffLimit.

A lost pod is deleted. Once it is being deleted, and its node is gone or Unknown, no kubelet will
ever confirm the deletion, so it is force-deleted (gracePeriodSeconds 0): the job never waits on
a pod stuck Terminating. A node that is NotReady but still reporting has a kubelet that will
confirm the deletion itself.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Literal

from torchjob.api import constants
from torchjob.lifecycle.observe import PodView
from torchjob.lifecycle.times import parse_time, seconds_text

# Seconds a node may be not Ready before its pods are lost (the reconciler's --node-lost-grace).
DEFAULT_NODE_LOST_GRACE = 60.0

NodeReady = Literal["True", "False", "Unknown"]


@dataclass(frozen=True, slots=True)
class NodeView:
    """What the reconciler observes of a node: its Ready condition's status and since when."""

    name: str
    ready: NodeReady
    since: datetime | None  # the Ready condition's lastTransitionTime
    deleting: bool = False


@dataclass(frozen=True, slots=True)
class NodesSeen:
    """The nodes of a job's pods as the cache shows them (a node absent from `by_name` does not
    exist), and how long a node may be not Ready before its pods are lost."""

    by_name: Mapping[str, NodeView]
    grace: float = DEFAULT_NODE_LOST_GRACE


def view_node(node: Mapping[str, Any]) -> NodeView:
    meta = node.get("metadata") or {}
    ready: NodeReady = "Unknown"
    since = None
    for condition in (node.get("status") or {}).get("conditions") or ():
        if isinstance(condition, dict) and condition.get("type") == "Ready":
            said = condition.get("status")
            ready = said if said in ("True", "False") else "Unknown"
            since = parse_time(condition.get("lastTransitionTime"))
    return NodeView(str(meta.get("name", "")), ready, since, bool(meta.get("deletionTimestamp")))


@dataclass(slots=True)
class NodeLosses:
    """What the round does about pods on lost nodes."""

    # The lost pods, each with `preempted` saying why (NodeLost), to join Round.preempted.
    lost: list[PodView] = field(default_factory=list)
    delete: list[tuple[str, str]] = field(default_factory=list)  # (name, uid), gracefully
    force_delete: list[tuple[str, str]] = field(default_factory=list)  # gracePeriodSeconds 0
    # What to tell of each loss, in a Warning Event NodeLost on the job.
    told: list[str] = field(default_factory=list)
    # Seconds until the grace of a node not Ready runs out: look again then.
    recheck: float | None = None


@dataclass(frozen=True, slots=True)
class _Verdict:
    lost: str | None = None  # why the node is lost; None while it is not
    unreachable: bool = False  # gone, or Unknown: no kubelet will confirm a deletion
    wait: float | None = None  # seconds until the grace runs out


def judge_nodes(
    pods: Iterable[PodView],
    wanted: Collection[tuple[str, int]],
    seen: NodesSeen | None,
    now: datetime,
    recorded_uid: Callable[[str], str | None],
) -> NodeLosses:
    """The losses among `pods`: those of the `wanted` replicas (by type and index) are lost and
    replaced; any pod stuck being deleted on an unreachable node is force-deleted.
    `recorded_uid` gives the pod uid the job's status records for a replica (by pod name). `seen`
    None: nodes are not watched (a local run), nothing is lost."""
    losses = NodeLosses()
    if seen is None:
        return losses
    for pod in pods:
        verdict = _judge(pod.node, seen, now) if pod.node else _Verdict()
        if verdict.wait is not None:
            losses.recheck = min(verdict.wait, losses.recheck or verdict.wait)
        if verdict.lost is None:
            continue
        if pod.deleting and verdict.unreachable:
            losses.force_delete.append((pod.name, pod.uid))
        if pod.finished or pod.preempted or (pod.replica_type, pod.index) not in wanted:
            continue  # an ending of its own, one already stopped by others, or a surplus pod
        losses.lost.append(replace(pod, preempted=constants.REASON_NODE_LOST))
        # Told once: the round that deletes it, or that first sees it deleted by another.
        if not pod.deleting or recorded_uid(pod.name) == pod.uid:
            losses.told.append(_lost_message(pod, verdict.lost))
        if not pod.deleting:
            losses.delete.append((pod.name, pod.uid))
    return losses


def _judge(name: str, seen: NodesSeen, now: datetime) -> _Verdict:
    node = seen.by_name.get(name)
    if node is None or node.deleting:
        return _Verdict(f"node {name} {'is being deleted' if node else 'does not exist'}", True)
    if node.ready == "True":
        return _Verdict()
    if node.since is None:  # no Ready condition yet: the grace counts from the next report
        return _Verdict(wait=seen.grace)
    elapsed = (now - node.since).total_seconds()
    if elapsed < seen.grace:
        return _Verdict(wait=seen.grace - elapsed)
    said = "its kubelet stopped reporting" if node.ready == "Unknown" else "NotReady"
    why = f"node {name} has not been Ready for {seconds_text(elapsed)} ({said})"
    return _Verdict(why, node.ready == "Unknown")


def _lost_message(pod: PodView, why: str) -> str:
    return (
        f"pod {pod.name} was lost with its node: {why}; the replica is created again, "
        "not counted as a restart"
    )
