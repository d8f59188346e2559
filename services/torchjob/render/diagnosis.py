"""What a replica's pod gets so that a hang says where it hung. Pure.

The restart agent (render/in_place.py, render/agent/restart_agent.py) also diagnoses: it writes
the diagnosis hook (render/agent/diagnosis_hook.py) into a shared `emptyDir` as the
`sitecustomize` of a directory that each training container's PYTHONPATH starts with, so every
Python process of the container (torchrun's agent, each rank, their data loaders) imports it at
start; the agent's postStart hook waits until it is written, so the training container, which
the kubelet starts after the agent has started, finds it. When the pod's diagnoses-asked
annotation rises, the agent asks each process for the stacks of all its threads (faulthandler,
no ptrace, no capability), prints them to its log and ends with a one-line summary the
reconciler reads (lifecycle/diagnosis.py).

A training container whose PYTHONPATH comes from elsewhere than a plain value of its own (a
`valueFrom`) is left without the hook: its processes are reported as none registered.
"""

from __future__ import annotations

import os
from typing import Any, Final

from torchjob.api import constants

VOLUME: Final = "torchjob-diagnosis"
PATH: Final = "/var/run/torchjob/diagnosis"
HOOK_DIR: Final = f"{PATH}/python"
SIZE_LIMIT: Final = "64Mi"
DIAGNOSES_FILE: Final = "diagnoses"
DIAGNOSES_FIELD_PATH: Final = f"metadata.annotations['{constants.ANNOTATION_DIAGNOSES_ASKED}']"
# The agent's postStart: wait (at most 30 s) for the hook the agent writes at its start.
WAIT_READY: Final = (
    "import os, sys, time\n"
    "deadline = time.monotonic() + 30\n"
    "while not os.path.exists(sys.argv[1]) and time.monotonic() < deadline:\n"
    "    time.sleep(0.02)\n"
)


def add_diagnosis(
    pod_spec: dict[str, Any], training: list[dict[str, Any]], agent: dict[str, Any], ready: str
) -> None:
    """Give the pod (its spec a copy the rewrite owns) the diagnosis volume, the `agent` its
    mount and postStart (waiting for the file `ready` in the volume), and each of the `training`
    containers (copies too) the mount and the PYTHONPATH that loads the hook."""
    mount = {"name": VOLUME, "mountPath": PATH}
    pod_spec["volumes"] = [
        *(pod_spec.get("volumes") or []),
        {"name": VOLUME, "emptyDir": {"sizeLimit": SIZE_LIMIT}},
    ]
    python = agent["command"][0]
    agent["volumeMounts"] = [*agent.get("volumeMounts", []), mount]
    wait = {"exec": {"command": [python, "-c", WAIT_READY, os.path.join(PATH, ready)]}}
    agent["lifecycle"] = {"postStart": wait}
    for container in training:
        env = list(container.get("env") or [])
        own = next((e for e in env if isinstance(e, dict) and e.get("name") == "PYTHONPATH"), None)
        if own is not None and "valueFrom" in own:
            continue
        if own is None:
            env.append({"name": "PYTHONPATH", "value": HOOK_DIR})
        else:
            env[env.index(own)] = {
                "name": "PYTHONPATH",
                "value": f"{HOOK_DIR}:{own.get('value', '')}",
            }
        container["env"] = env
        container["volumeMounts"] = [*(container.get("volumeMounts") or []), mount]


def asked_item() -> dict[str, Any]:
    """The downward API item of the diagnoses asked, beside the restarts asked."""
    return {"path": DIAGNOSES_FILE, "fieldRef": {"fieldPath": DIAGNOSES_FIELD_PATH}}
