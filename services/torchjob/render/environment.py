"""The distributed-training environment and the torchrun command line of a replica. Pure.

Plain python: MASTER_ADDR/MASTER_PORT point at the master replica; WORLD_SIZE is the number of
replicas and RANK the replica's rank (master 0, then the others in spec order).
torchrun: the same, plus the PET_* variables torchrun reads; WORLD_SIZE/RANK then describe the
replicas (nodes), and torchrun gives each process it starts its own RANK, LOCAL_RANK and
WORLD_SIZE (replicas x procPerNode).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torchjob.api import queries
from torchjob.api.constants import SERVICE_SCOPE_REPLICA
from torchjob.api.types import PyTorchTrainingJobSpec, TorchrunConfig
from torchjob.render.topology import (
    DEFAULT_MASTER_PORT,
    Replica,
    master_of,
    service_host,
    world_size,
)

EnvVar = dict[str, Any]


def replica_env(
    spec: PyTorchTrainingJobSpec,
    replica: Replica,
    *,
    job_name: str,
    namespace: str,
    job_uid: str,
    container: dict[str, Any],
    master_port: int = DEFAULT_MASTER_PORT,
    service_scope: str = SERVICE_SCOPE_REPLICA,
) -> list[EnvVar]:
    """The variables injected into the training container, in a stable order."""
    shared = job_environment(
        spec,
        job_name=job_name,
        namespace=namespace,
        job_uid=job_uid,
        master_port=master_port,
        service_scope=service_scope,
    )
    return shared.for_replica(replica, container)


@dataclass(frozen=True, slots=True)
class JobEnvironment:
    """The variables of every replica of one job, worked out once: those all replicas share,
    with the rank and the processes per node, which vary, filled in by `for_replica`. Each shared
    variable is made once, and every replica's list holds that same one: no one changes them."""

    plain: tuple[EnvVar, ...]  # before RANK
    # With torchrun: PET_NNODES, and how many processes a node runs ("gpu": the container's
    # GPU limit), then what follows PET_NODE_RANK; None without torchrun.
    nnodes: str | None
    proc_per_node: str
    torchrun: tuple[EnvVar, ...]

    def for_replica(self, replica: Replica, container: dict[str, Any]) -> list[EnvVar]:
        rank = str(replica.rank)
        env = [*self.plain, _variable("RANK", rank), _UNBUFFERED]
        if self.nnodes is not None:
            procs = self.proc_per_node
            if procs == "gpu":
                procs = str(queries.gpu_limit(container))
            env += [
                _variable("PET_NNODES", self.nnodes),
                _variable("PET_NPROC_PER_NODE", procs),
                _variable("PET_NODE_RANK", rank),
                *self.torchrun,
            ]
        return env


def _variable(name: str, value: str) -> EnvVar:
    return {"name": name, "value": value}


_UNBUFFERED = _variable("PYTHONUNBUFFERED", "1")

# What turns a collective that hangs into an exit of the training process, which the reconciler
# then restarts (lifecycle/gang.py); the user's own value of a variable wins. What torch (2.15)
# does by itself, from torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp:
# - TORCH_NCCL_ASYNC_ERROR_HANDLING: 3 (SkipCleanUp) unless set: when the watchdog finds a
#   collective past the process group's timeout (10 minutes, kProcessGroupNCCLDefaultTimeout) or
#   an NCCL error, it tears the process down without aborting the communicators, which can hang
#   themselves. But torchrun's agent gives its workers 1 (TearDown: abort the communicators,
#   then exit) when the variable is unset (torch/distributed/elastic/agent/server/
#   local_elastic_agent.py), and an abort that hangs keeps the process alive: under torchrun
#   torchjob sets 3, torch's own default, which the agent then passes on.
# - TORCH_NCCL_ENABLE_MONITORING: on; the heartbeat monitor aborts the process when the
#   watchdog thread itself stops (a CUDA or NCCL call that hangs).
# - TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC: 480, well inside the progress deadline's default (1800s).
# Both are what torchjob wants, so neither is set; a plain job (no torchrun) gets torch's
# defaults, which are already what torchjob wants. gloo has no watchdog: its collectives raise
# after the process group's timeout (30 minutes by default), and the progress deadline covers
# what they do not.
HANG_EXITS: tuple[EnvVar, ...] = (_variable("TORCH_NCCL_ASYNC_ERROR_HANDLING", "3"),)


def job_environment(
    spec: PyTorchTrainingJobSpec,
    *,
    job_name: str,
    namespace: str,
    job_uid: str,
    master_port: int = DEFAULT_MASTER_PORT,
    service_scope: str = SERVICE_SCOPE_REPLICA,
) -> JobEnvironment:
    master_type, master_index = master_of(spec)
    master_addr = service_host(job_name, namespace, master_type, master_index, service_scope)
    world = world_size(spec)
    plain = (
        _variable("MASTER_ADDR", master_addr),
        _variable("MASTER_PORT", str(master_port)),
        _variable("WORLD_SIZE", str(world)),
    )
    if not queries.torchrun_enabled(spec):
        return JobEnvironment(plain, None, "", ())
    config = spec.torchrun_config or TorchrunConfig()
    procs = config.proc_per_node or "1"
    torchrun = (
        _variable("PET_MASTER_ADDR", master_addr),
        _variable("PET_MASTER_PORT", str(master_port)),
        _variable("PET_RDZV_BACKEND", config.rdzv_backend or "c10d"),
        _variable("PET_RDZV_ENDPOINT", f"{master_addr}:{master_port}"),
        _variable("PET_RDZV_ID", job_uid),
        _variable("PET_MAX_RESTARTS", str(config.max_restarts or 0)),
        *HANG_EXITS,
    )
    return JobEnvironment(
        plain, nnodes(spec, world), procs if procs == "gpu" else str(int(procs)), torchrun
    )


def nnodes(spec: PyTorchTrainingJobSpec, world: int) -> str:
    """`N`, or `min:max` for an elastic job."""
    low, high = queries.elastic_bounds(spec)
    if low is None and high is None:
        return str(world)
    return f"{low or 1}:{high or world}"


def torchrun_argv(spec: PyTorchTrainingJobSpec, env: list[EnvVar], args: list[str]) -> list[str]:
    """`torchrun <flags from torchrunConfig> <extraOptions> <container args>`."""
    by_name = {e["name"]: e["value"] for e in env}
    config = spec.torchrun_config or TorchrunConfig()
    flags = [
        f"--nnodes={by_name['PET_NNODES']}",
        f"--nproc-per-node={by_name['PET_NPROC_PER_NODE']}",
        f"--max-restarts={by_name['PET_MAX_RESTARTS']}",
        f"--rdzv-backend={by_name['PET_RDZV_BACKEND']}",
        f"--rdzv-endpoint={by_name['PET_RDZV_ENDPOINT']}",
        f"--rdzv-id={by_name['PET_RDZV_ID']}",
    ]
    return ["torchrun", *flags, *(config.extra_options or []), *args]
