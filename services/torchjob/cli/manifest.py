"""A job manifest read from a file and admitted as the webhook admits it: defaulted, then
validated, every violation with its field path. A PyTorchTrainingJob is admitted by torchjob's own
rules; a Kubeflow PyTorchJob (`kubeflow.org/v1`) by Kubeflow's defaults and validation, its
violations naming the PyTorchJob's own fields, and then runs as the PyTorchTrainingJob
`as_training_job` makes of it, as on a cluster."""

from __future__ import annotations

import secrets
import sys
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from torchjob.api import constants
from torchjob.api.job_api import TRAINING_JOB, JobApi
from torchjob.api.jsoncopy import json_copy
from torchjob.api.kubeflow import KUBEFLOW_SPEC, KUBEFLOW_STATUS, STATUS_RECORD
from torchjob.api.trainer import RUNTIME_RECORD, is_runtime, runtime_snapshot
from torchjob.api.types import PyTorchTrainingJob, PyTorchTrainingJobSpec
from torchjob.kube.reconcile import JobKey
from torchjob.lifecycle.times import format_time
from torchjob.render.job_kinds import kind_of, written_api

DEFAULT_NAMESPACE = "default"


class InvalidManifest(Exception):
    """The manifest cannot be admitted; `errors` are `field.path: message` lines."""

    def __init__(self, errors: list[str]) -> None:
        super().__init__("; ".join(errors))
        self.errors = errors


@dataclass(frozen=True, slots=True)
class AdmittedJob:
    """The defaulted job as stored (`manifest`), and the same job as the reconciler sees it once
    the apiserver has given it a namespace, a uid and a generation (`job`). For a Kubeflow
    PyTorchJob, `manifest` is the defaulted PyTorchJob, `job` the PyTorchTrainingJob that runs it
    (still named by the PyTorchJob's apiVersion and kind, which own what is made for it)."""

    manifest: dict[str, Any]
    job: dict[str, Any]
    spec: PyTorchTrainingJobSpec
    typed: PyTorchTrainingJob
    warnings: list[str]
    api: JobApi = TRAINING_JOB
    # The stored job's own spec, from which a kind renders its pods' own parts (a PyTorchJob's
    # environment).
    own_spec: dict[str, Any] | None = None

    @property
    def meta(self) -> dict[str, Any]:
        meta: dict[str, Any] = self.job["metadata"]
        return meta

    @property
    def key(self) -> JobKey:
        return JobKey.of(self.job)


class _KubectlLoader(yaml.SafeLoader):
    """YAML as kubectl reads it: converted to JSON, which has no timestamps, so an unquoted
    `2024-01-01` (a creationTimestamp, an annotation) stays the string the apiserver sees."""


_KubectlLoader.yaml_implicit_resolvers = {
    first: [r for r in resolvers if r[0] != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def read_manifest(path: str) -> dict[str, Any]:
    """The one job of the YAML (or JSON) documents of `path` ('-' reads standard input). Beside a
    TrainJob the file may hold the training runtime it is made from, which is then copied into
    the job's status as the reconciler copies it (`with_runtime`)."""
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text()
    except OSError as error:
        raise InvalidManifest([f"{path}: {error.strerror or error}"]) from error
    try:
        documents = [d for d in yaml.load_all(text, Loader=_KubectlLoader) if d is not None]
    except yaml.YAMLError as error:
        raise InvalidManifest([f"{path}: not valid YAML: {error}"]) from error
    runtimes = [d for d in documents if isinstance(d, dict) and is_runtime(d)]
    jobs = [d for d in documents if not (isinstance(d, dict) and is_runtime(d))]
    if len(jobs) != 1:
        raise InvalidManifest(
            [
                f"{path}: holds {len(jobs)} jobs; give exactly one PyTorchTrainingJob, PyTorchJob "
                "or TrainJob (with the training runtimes it is made from)"
            ]
        )
    document = jobs[0]
    if not isinstance(document, dict):
        raise InvalidManifest([f"{path}: must be an object, not {type(document).__name__}"])
    return with_runtime(document, runtimes)


def with_runtime(document: dict[str, Any], runtimes: list[dict[str, Any]]) -> dict[str, Any]:
    """`document`, with the runtime among `runtimes` its kind copies into its status before it
    runs (`JobKind.runtime_to_copy`); as it was where it needs none, or none of them is it."""
    wanted = kind_of(written_api(document)).runtime_to_copy(document)
    if wanted is None:
        return document
    for runtime in runtimes:
        if (
            runtime.get("kind") == wanted.kind
            and (runtime.get("metadata") or {}).get("name") == wanted.name
        ):
            status = {STATUS_RECORD: {RUNTIME_RECORD: runtime_snapshot(runtime)}}
            return {**document, "status": status}
    return document


def admit(
    document: dict[str, Any], *, namespace: str | None = None, uid: str | None = None
) -> AdmittedJob:
    """Default and validate `document` as the webhooks of the API it is written in do
    (`written_api`: a Kubeflow PyTorchJob by its apiVersion or kind is admitted by Kubeflow's
    defaults and validation, and torchjob's rules on the job that runs it, its paths the
    PyTorchJob's); give it the identity the apiserver would (the namespace, a uid: `uid`, or a
    stable stand-in derived from the name). The job that runs it is its kind's `training_job`."""
    api = written_api(document)
    kind = kind_of(api)
    errors = _identity_errors(document, namespace, api)
    if errors:
        raise InvalidManifest(errors)
    manifest = kind.default(document)
    meta = manifest.setdefault("metadata", {})
    meta["namespace"] = meta.get("namespace") or namespace or DEFAULT_NAMESPACE
    result = kind.validate(manifest)
    if not result.allowed:
        raise InvalidManifest([str(e) for e in result.errors])
    stored = json_copy(manifest)
    _identify(stored["metadata"], uid)
    job = training_job_of(stored, api)
    typed = PyTorchTrainingJob.from_dict(job)
    assert typed.spec is not None  # validation refuses a job without one
    own_spec = stored.get("spec") or {}
    return AdmittedJob(manifest, job, typed.spec, typed, result.warnings, api, own_spec)


def training_job_of(stored: dict[str, Any], api: JobApi) -> dict[str, Any]:
    """The PyTorchTrainingJob that runs a defaulted job of `api`, without what its kind's
    `training_job` carries along for the operator (a PyTorchJob's own spec and status)."""
    job = kind_of(api).training_job(stored)
    job.pop(KUBEFLOW_STATUS, None)
    job.pop(KUBEFLOW_SPEC, None)
    return job


def _identify(job_meta: dict[str, Any], uid: str | None) -> None:
    """The name, uid, generation and creation time the apiserver gives a new object."""
    if not job_meta.get("name"):
        job_meta["name"] = job_meta["generateName"] + _suffix(uid)
    job_meta["uid"] = uid or str(
        uuid.uuid5(uuid.NAMESPACE_URL, f"torchjob:{JobKey.of({'metadata': job_meta})}")
    )
    job_meta.setdefault("generation", 1)
    job_meta.setdefault("creationTimestamp", format_time(datetime.now(UTC)))


def _identity_errors(document: dict[str, Any], namespace: str | None, api: JobApi) -> list[str]:
    errors = []
    if document.get("apiVersion") != api.api_version:
        errors.append(f"apiVersion: must be {api.api_version}, not {document.get('apiVersion')!r}")
    if document.get("kind") != api.kind:
        errors.append(f"kind: must be {api.kind}, not {document.get('kind')!r}")
    meta = document.get("metadata")
    if not isinstance(meta, dict):
        return [*errors, "metadata: must be an object with a name"]
    if not meta.get("name") and not meta.get("generateName"):
        errors.append("metadata.name: is required (or metadata.generateName)")
    written = meta.get("namespace")
    if namespace and written and namespace != written:
        errors.append(
            f"metadata.namespace: {written!r} does not match the namespace asked for "
            f"({namespace!r})"
        )
    return errors


def _suffix(uid: str | None) -> str:
    alphabet = "bcdfghjklmnpqrstvwxz2456789"  # the apiserver's: no vowels, no look-alikes
    if uid is None:  # a stable name for a stable rendering
        return alphabet[0] * constants.GENERATE_NAME_SUFFIX
    return "".join(secrets.choice(alphabet) for _ in range(constants.GENERATE_NAME_SUFFIX))
