"""Who is who in a job: replica names, the master, ranks and addresses. Pure."""

from __future__ import annotations

from dataclasses import dataclass

from torchjob.api import queries
from torchjob.api.constants import SERVICE_SCOPE_JOB, SERVICE_SCOPE_REPLICA
from torchjob.api.types import PyTorchTrainingJobSpec

DEFAULT_MASTER_PORT = 23456
MASTER_PORT_NAME = "pytorchjob-port"


@dataclass(frozen=True, slots=True)
class Replica:
    """One replica of a job: its type, its index in that type and its rank in the job."""

    type: str
    index: int
    rank: int

    @property
    def is_master(self) -> bool:
        return self.rank == 0


def replica_name(job_name: str, replica_type: str, index: int) -> str:
    """The name of the replica's Pod, its hostname, and the name of its own headless Service
    where it has one (service scope `Replica`)."""
    return f"{job_name}-{replica_type}-{index}"


def service_name(job_name: str, replica: Replica, scope: str) -> str:
    """The headless Service that publishes the replica's address (queries.service_scope): its
    own, or the job's, which has the job's name."""
    if scope == SERVICE_SCOPE_JOB:
        return job_name
    return replica_name(job_name, replica.type, replica.index)


def replica_address(
    job_name: str, replica_type: str, index: int, scope: str = SERVICE_SCOPE_REPLICA
) -> str:
    """The replica's name as its namespace's pods resolve it: its Service's name, or its
    hostname under the job's Service."""
    name = replica_name(job_name, replica_type, index)
    return f"{name}.{job_name}" if scope == SERVICE_SCOPE_JOB else name


def master_of(spec: PyTorchTrainingJobSpec) -> tuple[str, int]:
    """Replica 0 of the `master` type when there is one, else replica 0 of the first type."""
    types = [r.type or "" for r in spec.replica_specs or []]
    return (queries.MASTER_TYPE if queries.MASTER_TYPE in types else types[0]), 0


def replica_counts(spec: PyTorchTrainingJobSpec) -> list[tuple[str, int]]:
    """Each replica type's count in spec order: its `replicas` (one when unset), except that an
    elastic job with spec.elastic.expectedReplicas runs that many replicas in all, the
    difference going to its scaling type (`scaling_type`), which keeps at least one."""
    counts = [(r.type or "", r.replicas or 1) for r in spec.replica_specs or []]
    elastic = spec.elastic
    expected = elastic.expected_replicas if elastic and elastic.enabled else None
    if not expected or not counts:
        return counts
    scaling = scaling_type(spec)
    others = sum(count for kind, count in counts if kind != scaling)
    return [(k, max(1, expected - others) if k == scaling else c) for k, c in counts]


def scaling_type(spec: PyTorchTrainingJobSpec) -> str:
    """The replica type an elastic job scales: the largest scalingWeight (the first on a tie);
    with no weight above 0, `worker`, else the last replica spec."""
    specs = spec.replica_specs or []
    weighted = [(r.scaling_weight or 0, -i, r.type or "") for i, r in enumerate(specs)]
    best = max(weighted, default=(0, 0, ""))
    if best[0] > 0:
        return best[2]
    types = [r.type or "" for r in specs]
    return "worker" if "worker" in types else types[-1]


def replicas_of(spec: PyTorchTrainingJobSpec) -> list[Replica]:
    """Every replica in rank order: the master is rank 0, then every other replica in spec order."""
    master = master_of(spec)
    out = [Replica(master[0], master[1], 0)]
    for kind, count in replica_counts(spec):
        for index in range(count):
            if (kind, index) != master:
                out.append(Replica(kind, index, len(out)))
    return out


def world_size(spec: PyTorchTrainingJobSpec) -> int:
    """How many replicas the job has (a replica spec without `replicas` has one)."""
    return sum(count for _, count in replica_counts(spec))


def replica_at(spec: PyTorchTrainingJobSpec, replica_type: str, index: int) -> Replica | None:
    """The replica `replica_type`/`index` with its rank, as `replicas_of` would place it, worked
    out from the replica spec counts alone: admitting each pod of a large job stays cheap."""
    return layout_of(spec).replica_at(replica_type, index)


@dataclass(frozen=True, slots=True)
class Layout:
    """The master and each replica type's count: all that placing a replica needs, worked out
    once for every replica of a job."""

    master: tuple[str, int]
    counts: tuple[tuple[str, int], ...]

    def replica_at(self, replica_type: str, index: int) -> Replica | None:
        master = self.master
        if (replica_type, index) == master:
            return Replica(replica_type, index, 0)
        rank = 1  # after the master
        for kind, count in self.counts:
            if kind == replica_type:
                if not 0 <= index < count:
                    return None
                # The master is index 0 of its type and already counted first.
                return Replica(replica_type, index, rank + index - (replica_type == master[0]))
            rank += count - (kind == master[0])
        return None


def layout_of(spec: PyTorchTrainingJobSpec) -> Layout:
    return Layout(master_of(spec), tuple(replica_counts(spec)))


def service_host(
    job_name: str,
    namespace: str,
    replica_type: str,
    index: int,
    scope: str = SERVICE_SCOPE_REPLICA,
) -> str:
    """The replica's DNS name, resolvable from any namespace."""
    return f"{replica_address(job_name, replica_type, index, scope)}.{namespace}.svc"
