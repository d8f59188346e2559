"""The init container that holds a replica back until the master's name resolves. Pure.

A replica's Service name resolves only once the replica's pod has an IP (the headless Service
publishes not-ready addresses) and the DNS server has caught up, about a second later; a worker
can start long before the master pod even exists. Without a wait the training script's first
connection fails on name resolution, and torchrun or init_process_group gives up. So every
replica's pod starts with `wait-for-master`: the training container's own image and Python
running a short loop over socket.getaddrinfo(MASTER_ADDR) (a TrainJob's node has torchrun's
PET_MASTER_ADDR only: that one), printing a line every 10 seconds
while it waits. It has no timeout of its own: the job's activeDeadlineSeconds bounds it.

The master waits for its own name too: torchrun's c10d rendezvous and init_process_group connect
to MASTER_ADDR from every replica, the master's own included, so a job of one replica needs it
as much as any. Not added in debug mode (nothing trains), nor when torchrun rendezvouses through
etcd (torchrun then elects the store's host itself and replaces MASTER_ADDR).

Its resources are the training container's cpu, memory and ephemeral-storage requests and
limits: an init container's requests count only as far as they exceed the pod's containers' sum,
so the copy costs nothing in scheduling or quota, it passes any LimitRange minimum or maximum the
training container passes, it is admitted where a ResourceQuota demands requests or limits, and
a pod of Guaranteed QoS stays Guaranteed. Extended resources (GPUs) are not copied: a device
plugin would allocate them to the wait.
"""

from __future__ import annotations

import re
from typing import Any

from torchjob.api import queries
from torchjob.api.jsoncopy import json_copy
from torchjob.api.types import PyTorchTrainingJobSpec

WAIT_FOR_MASTER = "wait-for-master"
COPIED_RESOURCES = ("cpu", "memory", "ephemeral-storage")
ETCD_BACKENDS = ("etcd", "etcd-v2")
DEFAULT_PYTHON = "python3"  # present wherever a Python 3 is; `python` is not on Debian's own
_PYTHON = re.compile(r"(.*/)?python[0-9.]*")

# No `$(`: the kubelet would expand it as a variable reference.
WAIT_SCRIPT = """\
import os, socket, time
host, began, said = os.environ["MASTER_ADDR"], time.monotonic(), None
while True:
    try:
        socket.getaddrinfo(host, None)
        break
    except OSError as error:
        waited = time.monotonic() - began
        if said is None or waited - said >= 10:
            print(f"waiting for {host} to resolve ({waited:.0f}s): {error}", flush=True)
            said = waited
        time.sleep(0.5)
print(f"{host} resolves", flush=True)
"""


def wants_wait(spec: PyTorchTrainingJobSpec) -> bool:
    if queries.debug_enabled(spec):
        return False
    config = spec.torchrun_config
    return not (queries.torchrun_enabled(spec) and config and config.rdzv_backend in ETCD_BACKENDS)


def add_wait_for_master(
    pod_spec: dict[str, Any], training: dict[str, Any], python: str | None
) -> None:
    """Put `wait-for-master` first among the pod's init containers, unless a container of that
    name is there already (added by an earlier rewrite of the same pod, or the user's own).
    `training` is the training container with its environment injected; `python` is the
    interpreter its command names, if it names one."""
    taken = {
        c.get("name")
        for key in ("initContainers", "containers")
        for c in pod_spec.get(key) or []
        if isinstance(c, dict)
    }
    if WAIT_FOR_MASTER in taken:
        return
    init = [wait_container(training, python), *(pod_spec.get("initContainers") or [])]
    pod_spec["initContainers"] = init


def wait_container(training: dict[str, Any], python: str | None) -> dict[str, Any]:
    """The wait, for the master the training container's MASTER_ADDR names, else its
    PET_MASTER_ADDR (torchrun's, all a Kubeflow Trainer TrainJob's node has)."""
    named = {e.get("name"): e for e in training.get("env") or [] if isinstance(e, dict)}
    master = named.get("MASTER_ADDR") or named.get("PET_MASTER_ADDR")
    container: dict[str, Any] = {
        "name": WAIT_FOR_MASTER,
        "image": training.get("image"),
        "command": [python or DEFAULT_PYTHON, "-c", WAIT_SCRIPT],
        "env": [] if master is None else [{**_copied_variable(master), "name": "MASTER_ADDR"}],
        "resources": copied_resources(training),
        **pulled_and_run_as(training),
    }
    return container


def pulled_and_run_as(training: dict[str, Any]) -> dict[str, Any]:
    """The training container's imagePullPolicy and securityContext, copied, for a container
    of ours on its image: pulled as it is, and admitted where it is (Pod Security included)."""
    return {
        key: value if type(value) is str else json_copy(value)
        for key in ("imagePullPolicy", "securityContext")
        if (value := training.get(key)) is not None
    }


def _copied_variable(variable: dict[str, Any]) -> dict[str, Any]:
    # A name and a value need no deep copy; a valueFrom does.
    if all(type(value) is str for value in variable.values()):
        return dict(variable)
    return json_copy(variable)


def copied_resources(training: dict[str, Any]) -> dict[str, Any]:
    resources = training.get("resources")
    out: dict[str, Any] = {}
    if not resources or not isinstance(resources, dict):
        return out
    for kind in ("requests", "limits"):
        given = resources.get(kind)
        kept = {k: v for k, v in (given or {}).items() if k in COPIED_RESOURCES}
        if kept:
            out[kind] = kept
    return out


def python_of(container: dict[str, Any]) -> str | None:
    """The Python interpreter the container's own command starts (`python`, `python3.11`,
    `/opt/conda/bin/python`), or None when its command is something else."""
    command = container.get("command")
    first = command[0] if isinstance(command, list) and command else None
    return first if isinstance(first, str) and _PYTHON.fullmatch(first) else None
