"""PyTorchTrainingJob manifests for tests, built in one fluent style:

    JobBuilder("j").replicas("worker", 2).restart_policy("Never").torchrun().build()

or started from an example of tests/data/t9k (`JobBuilder.example("basic")`). `build()` returns
a new manifest dict each time (`decoded()` the API's typed job); a builder shared by several
tests is `clone()`d before it is changed."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from torchjob.api import types

EXAMPLES = Path(__file__).parents[1] / "data" / "t9k"
# The container of a replica added by `replicas()` unless one is given.
CONTAINER: dict[str, Any] = {
    "name": "python",
    "image": "i",
    "command": ["python"],
    "args": ["t.py"],
}
# What the restricted Pod Security Standard requires of a pod and of each container.
RESTRICTED_POD = {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
RESTRICTED_CONTAINER = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}

Manifest = dict[str, Any]


class JobBuilder:
    """A job manifest, changed one call at a time; each call returns the builder."""

    def __init__(self, name: str = "j", namespace: str | None = None) -> None:
        metadata: dict[str, Any] = {"name": name}
        if namespace is not None:
            metadata["namespace"] = namespace
        self._job: Manifest = {
            "apiVersion": types.API_VERSION,
            "kind": types.KIND,
            "metadata": metadata,
            "spec": {"replicaSpecs": []},
        }

    @classmethod
    def example(cls, stem: str = "torchrun", name: str | None = None) -> JobBuilder:
        """Start from tests/data/t9k/<stem>.yaml (as T9k users write jobs)."""
        loaded = yaml.safe_load((EXAMPLES / f"{stem}.yaml").read_text())
        assert isinstance(loaded, dict)
        builder = cls()
        builder._job = loaded
        if name is not None:
            builder.name(name)
        return builder

    # -- metadata --------------------------------------------------------------------------------

    def name(self, name: str) -> JobBuilder:
        self._job["metadata"]["name"] = name
        return self

    def metadata(self, **fields: Any) -> JobBuilder:
        """Set metadata fields (namespace, uid, generation, labels, ...)."""
        self._job["metadata"].update(copy.deepcopy(fields))
        return self

    # -- replicas --------------------------------------------------------------------------------

    def replicas(
        self,
        replica_type: str,
        count: int | None = None,
        *,
        container: dict[str, Any] | None = None,
        template: dict[str, Any] | None = None,
        **fields: Any,
    ) -> JobBuilder:
        """The replica spec of `replica_type`: added at the end if there is none, with
        `template` or else a pod of `container` (CONTAINER by default); `count` replicas when
        given, and any other replica spec `fields` (restartPolicy, ...)."""
        spec = self._replica_spec(replica_type)
        if spec is None:
            spec = {"type": replica_type}
            self._job["spec"]["replicaSpecs"].append(spec)
        if count is not None:
            spec["replicas"] = count
        spec.update(copy.deepcopy(fields))
        if template is not None:
            spec["template"] = copy.deepcopy(template)
        elif container is not None or "template" not in spec:
            spec["template"] = {"spec": {"containers": [copy.deepcopy(container or CONTAINER)]}}
        return self

    def restart_policy(self, policy: str, replica_type: str | None = None) -> JobBuilder:
        """The restartPolicy of the replicas of `replica_type`, or of every replica spec."""
        for spec in self._replica_specs(replica_type):
            spec["restartPolicy"] = policy
        return self

    def replica_count(self, count: int, replica_type: str | None = None) -> JobBuilder:
        """The replicas of `replica_type`, or of every replica spec."""
        for spec in self._replica_specs(replica_type):
            spec["replicas"] = count
        return self

    def pod_spec(self, replica_type: str | None = None, **fields: Any) -> JobBuilder:
        """Set fields of the pod template's spec."""
        for spec in self._replica_specs(replica_type):
            spec["template"].setdefault("spec", {}).update(copy.deepcopy(fields))
        return self

    def container(self, replica_type: str | None = None, **fields: Any) -> JobBuilder:
        """Set fields of the first container; a field set to None is removed."""
        for spec in self._replica_specs(replica_type):
            container = spec["template"]["spec"]["containers"][0]
            for key, value in fields.items():
                if value is None:
                    container.pop(key, None)
                else:
                    container[key] = copy.deepcopy(value)
        return self

    def restricted(self) -> JobBuilder:
        """Pods that pass the restricted Pod Security Standard."""
        for spec in self._replica_specs(None):
            pod = spec["template"]["spec"]
            pod["securityContext"] = copy.deepcopy(RESTRICTED_POD)
            for container in pod["containers"]:
                container["securityContext"] = copy.deepcopy(RESTRICTED_CONTAINER)
        return self

    # -- the rest of the spec --------------------------------------------------------------------

    def spec(self, **fields: Any) -> JobBuilder:
        """Set top-level spec fields as given (runMode, scheduler, ...)."""
        self._job["spec"].update(copy.deepcopy(fields))
        return self

    def run_policy(self, **fields: Any) -> JobBuilder:
        """Set fields of spec.runPolicy (backoffLimit, cleanUpPolicy, ...)."""
        if fields:
            self._job["spec"].setdefault("runPolicy", {}).update(copy.deepcopy(fields))
        return self

    def torchrun(self, **config: Any) -> JobBuilder:
        """torchrunConfig, enabled, with `config`."""
        self._job["spec"]["torchrunConfig"] = {"enabled": True, **copy.deepcopy(config)}
        return self

    def elastic(self, **bounds: Any) -> JobBuilder:
        """spec.elastic, enabled, with `bounds` (minReplicas, maxReplicas)."""
        self._job["spec"]["elastic"] = {"enabled": True, **copy.deepcopy(bounds)}
        return self

    def tensorboard(self, **tensorboard_spec: Any) -> JobBuilder:
        self._job["spec"]["tensorboardSpec"] = copy.deepcopy(tensorboard_spec)
        return self

    # -- results ---------------------------------------------------------------------------------

    def build(self) -> Manifest:
        """The manifest, as a new dict."""
        return copy.deepcopy(self._job)

    def build_spec(self) -> dict[str, Any]:
        """Only the spec, as a new dict."""
        return copy.deepcopy(self._job["spec"])

    def decoded(self) -> types.PyTorchTrainingJob:
        """The job decoded into the API's types, as the services see it."""
        return types.PyTorchTrainingJob.from_dict(self.build())

    def decoded_spec(self) -> types.PyTorchTrainingJobSpec:
        """Only the spec, decoded into the API's types."""
        return types.PyTorchTrainingJobSpec.from_dict(self.build_spec())

    def clone(self) -> JobBuilder:
        """A builder of its own starting from this one's job (for a base shared by tests)."""
        other = JobBuilder()
        other._job = self.build()
        return other

    def _replica_spec(self, replica_type: str) -> dict[str, Any] | None:
        specs = [s for s in self._job["spec"]["replicaSpecs"] if s.get("type") == replica_type]
        return specs[0] if specs else None

    def _replica_specs(self, replica_type: str | None) -> list[dict[str, Any]]:
        specs: list[dict[str, Any]] = self._job["spec"]["replicaSpecs"]
        return [s for s in specs if replica_type is None or s.get("type") == replica_type]


def job_manifest(stem: str = "torchrun", name: str | None = None) -> Manifest:
    """An example of tests/data/t9k as it is (optionally renamed)."""
    return JobBuilder.example(stem, name).build()


def names(job: str, replica_type: str, count: int) -> set[str]:
    """The names of a job's first `count` replicas of `replica_type` (pods and Services)."""
    return {f"{job}-{replica_type}-{i}" for i in range(count)}
