"""Resource figures as the cluster commands show them: Kubernetes quantities read as numbers,
what pods and jobs request, and the figures formatted as `kubectl top` prints them. Pure.

`quantity` is our own reader, not a client library's: kubernetes-asyncio (36) has no
`parse_quantity` (the synchronous `kubernetes` package has, a second client to install for one
function), the services may not import kubernetes-asyncio (import-linter) while the console reads
quantities too, and a figure shown to a person reads an unreadable quantity as 0 where
`parse_quantity` raises."""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

from torchjob.api.objects import FINISHED_POD_PHASES
from torchjob.api.queries import GPU_RESOURCE, training_container_in

_SUFFIXES = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal(10**3),
    "M": Decimal(10**6),
    "G": Decimal(10**9),
    "T": Decimal(10**12),
    "P": Decimal(10**15),
    "E": Decimal(10**18),
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
    "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
}


def quantity(value: Any) -> Decimal:
    """A Kubernetes quantity ("500m", "2Gi", 3) as a number; 0 when unreadable."""
    if isinstance(value, bool):
        return Decimal(0)
    if isinstance(value, int | float):
        return Decimal(str(value))
    if not isinstance(value, str) or not value:
        return Decimal(0)
    text = value.strip()
    for suffix in sorted(_SUFFIXES, key=len, reverse=True):
        if suffix and text.endswith(suffix):
            number = text[: -len(suffix)]
            break
    else:
        suffix, number = "", text
    try:
        return Decimal(number) * _SUFFIXES[suffix]
    except InvalidOperation:
        return Decimal(0)


def format_cpu(cores: Decimal) -> str:
    """Cores as kubectl top shows them: millicores."""
    return f"{int((cores * 1000).to_integral_value())}m"


def format_memory(size: Decimal) -> str:
    """Bytes in Mi, or Gi from 10Gi up."""
    mib = size / (2**20)
    if mib >= 10 * 1024:
        return f"{(mib / 1024).quantize(Decimal('0.1'))}Gi".replace(".0Gi", "Gi")
    return f"{int(mib.to_integral_value())}Mi"


def format_gpus(count: Decimal) -> str:
    return str(int(count)) if count == count.to_integral_value() else str(count.normalize())


@dataclass(slots=True)
class Resources:
    """CPU (cores), memory (bytes) and GPUs."""

    cpu: Decimal = field(default_factory=Decimal)
    memory: Decimal = field(default_factory=Decimal)
    gpus: Decimal = field(default_factory=Decimal)

    def __add__(self, other: Resources) -> Resources:
        return Resources(self.cpu + other.cpu, self.memory + other.memory, self.gpus + other.gpus)

    def times(self, count: int) -> Resources:
        return Resources(self.cpu * count, self.memory * count, self.gpus * count)

    @classmethod
    def of(cls, amounts: Any) -> Resources:
        amounts = amounts if isinstance(amounts, dict) else {}
        return cls(
            quantity(amounts.get("cpu")),
            quantity(amounts.get("memory")),
            quantity(amounts.get(GPU_RESOURCE)),
        )

    @classmethod
    def maximum(cls, a: Resources, b: Resources) -> Resources:
        return cls(max(a.cpu, b.cpu), max(a.memory, b.memory), max(a.gpus, b.gpus))


def container_requests(container: dict[str, Any]) -> Resources:
    """What a container asks for: its requests, else its limits (the apiserver's defaulting)."""
    resources = container.get("resources") or {}
    requests = dict(resources.get("limits") or {})
    requests.update(resources.get("requests") or {})
    return Resources.of(requests)


def pod_spec_requests(pod_spec: dict[str, Any]) -> Resources:
    """What the scheduler reserves for a pod: the sum of its containers, or its largest init
    container when that is more (the scheduler's rule)."""
    total = Resources()
    for container in pod_spec.get("containers") or []:
        total = total + container_requests(container)
    for container in pod_spec.get("initContainers") or []:
        total = Resources.maximum(total, container_requests(container))
    return total


def job_requests(job: dict[str, Any]) -> Resources:
    """What every replica of the job asks for together, from its spec."""
    total = Resources()
    for replica in (job.get("spec") or {}).get("replicaSpecs") or []:
        pod_spec = (replica.get("template") or {}).get("spec") or {}
        total = total + pod_spec_requests(pod_spec).times(int(replica.get("replicas") or 1))
    return total


def job_gpus(job: dict[str, Any]) -> Decimal:
    """GPUs of the job: each replica's training container's limit, times its replicas."""
    total = Decimal(0)
    for replica in (job.get("spec") or {}).get("replicaSpecs") or []:
        pod_spec = (replica.get("template") or {}).get("spec") or {}
        _, container = training_container_in(pod_spec)
        limits = ((container or {}).get("resources") or {}).get("limits") or {}
        total += quantity(limits.get(GPU_RESOURCE)) * int(replica.get("replicas") or 1)
    return total


def is_active(pod: dict[str, Any]) -> bool:
    """The pod holds its node's resources: placed, not finished, not being deleted."""
    phase = (pod.get("status") or {}).get("phase")
    return bool((pod.get("spec") or {}).get("nodeName")) and phase not in FINISHED_POD_PHASES
