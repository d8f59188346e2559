"""What a replica's pod gets so that its containers can be restarted where it stands. Pure.

Kubernetes 1.35 and later can restart a pod's containers in place: a container's
`restartPolicyRules` say which exit codes restart it (`Restart`) or every container of the pod,
init containers again first (`RestartAllContainers`); the pod keeps its uid, node, IP and
volumes, and nothing is scheduled or pulled again. So a pod made to restart in place gets:

- on each training container, a rule that restarts it on the exit codes its replica's restart
  policy restarts (api/queries.restarts_after_failure), so the pod does not end on such a failure
  and the reconciler decides what follows (a gang restart, the job's failure) as it would have
  for a pod that ended;
- `restart-agent`, a native sidecar on the training container's image and Python, which reads
  the pod's ANNOTATION_RESTARTS_ASKED through the downward API and exits with AGENT_EXIT_CODE
  once it exceeds the agent's own starts before this one (counted in a memory `emptyDir` that
  the restart keeps), and whose rule restarts every container on that code. The reconciler asks
  a pod to restart by raising the annotation to the agent's restartCount + 1; the kubelet
  refreshes the file within seconds, and the agent's restartCount says when the pod has done it.
  The agent also collects a diagnosis when asked (render/diagnosis.py); its program is
  render/agent/restart_agent.py.

Not in debug mode (nothing trains), nor when the job says `restart-in-place: "false"`. Where
the apiserver drops the rules (the features off), the pod is not made to restart in place
(`restarts_in_place`) and the reconciler recreates it, as before.

The agent's resources are small and equal in requests and limits, so that a pod of Guaranteed
QoS stays Guaranteed; a sidecar's requests add to the pod's, unlike an init container's.
"""

from __future__ import annotations

from importlib import resources
from typing import Any, Final

from torchjob.api import constants, queries
from torchjob.render import diagnosis
from torchjob.render.agent import restart_agent
from torchjob.render.wait import DEFAULT_PYTHON, pulled_and_run_as

AGENT: Final = "restart-agent"
AGENT_EXIT_CODE: Final = restart_agent.RESTART_EXIT_CODE
ASKED_VOLUME: Final = "torchjob-restarts-asked"
STARTS_VOLUME: Final = "torchjob-agent-starts"
MOUNT_PATH: Final = "/var/run/torchjob/restart"
RESTARTS_FILE: Final = "restarts"
STARTS_PATH: Final = "/var/run/torchjob/agent"
AGENT_RESOURCES: Final = {"cpu": "50m", "memory": "64Mi"}
RESTART_ALL: Final = "RestartAllContainers"
# What the kubelet writes as the last state of each container it restarted for a
# RestartAllContainers rule (the one whose exit set it off included).
RESTARTED_ALL_REASON: Final = "RestartingAllContainers"
# The programs the agent runs, as their source: the pod carries them (torchjob is not installed
# on the training image).
_AGENTS = resources.files("torchjob.render.agent")
AGENT_SOURCE: Final = _AGENTS.joinpath("restart_agent.py").read_text()
HOOK_SOURCE: Final = _AGENTS.joinpath("diagnosis_hook.py").read_text()
RESTARTS_FIELD_PATH: Final = f"metadata.annotations['{constants.ANNOTATION_RESTARTS_ASKED}']"


def wants_in_place(job_meta: dict[str, Any], debug: bool) -> bool:
    """Whether the job's pods are made to restart in place."""
    return not debug and queries.restart_in_place(job_meta)


def add_in_place(
    pod_spec: dict[str, Any], training: list[dict[str, Any]], policy: str, python: str | None
) -> None:
    """Give the pod (its spec a copy the rewrite owns) the agent and its volumes, and each of the
    `training` containers (copies too) the rule of its replica's restart `policy`. Idempotent:
    a pod that has the agent already is left as it is."""
    init = list(pod_spec.get("initContainers") or [])
    if any(isinstance(c, dict) and c.get("name") == AGENT for c in init):
        return
    agent = agent_container(training[0], python)
    pod_spec["initContainers"] = [*init, agent]
    restarts = {"path": RESTARTS_FILE, "fieldRef": {"fieldPath": RESTARTS_FIELD_PATH}}
    asked = {"items": [restarts, diagnosis.asked_item()]}
    starts = {"medium": "Memory", "sizeLimit": "1Mi"}
    pod_spec["volumes"] = [
        *(pod_spec.get("volumes") or []),
        {"name": ASKED_VOLUME, "downwardAPI": asked},
        {"name": STARTS_VOLUME, "emptyDir": starts},
    ]
    diagnosis.add_diagnosis(pod_spec, training, agent, restart_agent.READY_FILE)
    rule = training_rule(policy)
    if rule is None:
        return
    for container in training:
        container["restartPolicy"] = "Never"
        container["restartPolicyRules"] = [rule]


def training_rule(policy: str) -> dict[str, Any] | None:
    """The training container's rule: restart it on the exit codes `policy` restarts; None for
    a policy that restarts on none."""
    if queries.restarts_after_failure(policy, 1):
        codes = {"operator": "NotIn", "values": [0]}
    elif retryable := sorted(c for c in range(1, 256) if queries.restarts_after_failure(policy, c)):
        codes = {"operator": "In", "values": retryable}
    else:
        return None
    return {"action": "Restart", "exitCodes": codes}


def agent_container(training: dict[str, Any], python: str | None) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": AGENT,
        "image": training.get("image"),
        "command": [
            python or DEFAULT_PYTHON,
            "-c",
            AGENT_SOURCE,
            MOUNT_PATH,
            f"{STARTS_PATH}/starts",
            diagnosis.PATH,
            HOOK_SOURCE,
        ],
        "restartPolicy": "Always",
        "restartPolicyRules": [
            {
                "action": RESTART_ALL,
                "exitCodes": {"operator": "In", "values": [AGENT_EXIT_CODE]},
            }
        ],
        "resources": {"requests": dict(AGENT_RESOURCES), "limits": dict(AGENT_RESOURCES)},
        "volumeMounts": [
            {"name": ASKED_VOLUME, "mountPath": MOUNT_PATH, "readOnly": True},
            {"name": STARTS_VOLUME, "mountPath": STARTS_PATH},
        ],
        **pulled_and_run_as(training),
    }
    return container


def restarts_in_place(pod_spec: dict[str, Any]) -> bool:
    """The pod was made to restart in place and the apiserver kept what that needs: its agent
    with the agent's rule (an apiserver without the features drops the rules)."""
    for container in pod_spec.get("initContainers") or ():
        if isinstance(container, dict) and container.get("name") == AGENT:
            return bool(container.get("restartPolicyRules"))
    return False
