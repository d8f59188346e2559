"""Nodes a job's replicas keep failing on, and the job's new pods avoiding them. Pure.

Each charged gang restart (lifecycle/gang.py) records the node of the replica whose failure made
it (`status.gangRestartNodes`; none for a restart for no progress, whose hang no rank is blamed
for yet, nor for a pod that was deleted). When the next charged gang restart is made for a
failure on a node the one before named, that node is avoided: a Warning Event `NodeAvoided`
names it, it joins `status.avoidedNodes` (at most constants.MAX_AVOIDED_NODES, the latest kept),
and from then on every pod the job creates prefers the other nodes (a preferred node affinity on
the node's name: render/replica_objects.py). A preference, not a rule: a cluster whose other nodes
are full, or that has no other, still places the job rather than leaving it unschedulable.

A pod restarted in place stays on its node, so in a gang restart the pods on an avoided node are
recreated, and the others restarted in place (lifecycle/in_place.py).

A job annotated `batch.tensorstack.dev/avoid-failing-nodes: "false"` avoids none; the nodes are
still recorded.
"""

from __future__ import annotations

from dataclasses import dataclass

from torchjob.api import constants, queries
from torchjob.lifecycle.conditions import Event
from torchjob.lifecycle.round import GangCause, Round


@dataclass(frozen=True, slots=True)
class NodesJudged:
    """The nodes a gang restart names, those the job avoids after it, and the Events that
    announce newly avoided ones."""

    named: tuple[str, ...]
    avoided: tuple[str, ...]
    events: tuple[Event, ...] = ()


def judge(state: Round, cause: GangCause) -> NodesJudged:
    """What the gang restart made for `cause` records and avoids. An uncharged one (the cluster
    took a pod) leaves the record as it was."""
    if not cause.charged:
        return NodesJudged(state.gang_restart_nodes, state.avoided_nodes)
    pod = cause.pending.pod if cause.pending else None
    named = (pod.node,) if pod is not None and pod.node else ()
    if not queries.avoids_failing_nodes(state.observed.job_meta):
        return NodesJudged(named, ())
    avoided, events = list(state.avoided_nodes), []
    for node in named:
        if node in state.gang_restart_nodes and node not in avoided:
            avoided.append(node)
            said = (
                f"node {node}: replicas of this job failed on it in two gang restarts in a row "
                f"(the last: {cause.what}); the job's new pods prefer other nodes"
            )
            events.append(Event("Warning", constants.REASON_NODE_AVOIDED, said))
    return NodesJudged(named, tuple(avoided[-constants.MAX_AVOIDED_NODES :]), tuple(events))
