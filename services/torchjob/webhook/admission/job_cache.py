"""The pod route's cache of job models: each job a pod claims, decoded and prepared for rendering
once per stored version rather than once per replica pod."""

from __future__ import annotations

from typing import Any

import orjson
from cachetools import LRUCache

from torchjob.render.pod_admission_handler import decode_job
from torchjob.render.pod_rewrite import PreparedJob


class DecodedJobs:
    """The typed model of each cached job, decoded and prepared for rendering once per stored
    version (its uid and resourceVersion) rather than once per replica pod, and the job itself
    parsed once per version of the cache's JSON. The replicas of a job are admitted one after
    another, so the models most recently used are the ones kept. A Kubeflow PyTorchJob's model
    is the PyTorchTrainingJob that runs it. What is kept is shared by the admissions that read
    it: they only read it."""

    def __init__(self, capacity: int = 256, parsed_capacity: int = 16) -> None:
        self._decoded: LRUCache[tuple[str, str], PreparedJob] = LRUCache(capacity)
        # By namespace and name: the cache's JSON of the job (held, so that its identity stands
        # for its version) and the job parsed from it. A parsed job is several times the size of
        # its model: only the jobs whose pods are being admitted now are kept parsed.
        self._parsed: LRUCache[tuple[str, str], tuple[bytes, dict[str, Any]]] = LRUCache(
            parsed_capacity
        )
        # The stored job decoded last, by identity: the replicas of a job come one after another,
        # each with the job parsed once (`parsed`), and then need no lookup by version.
        self._last: tuple[dict[str, Any], PreparedJob] | None = None

    def decode(self, job: dict[str, Any]) -> PreparedJob:
        last = self._last
        if last is not None and last[0] is job:
            return last[1]
        metadata = job.get("metadata")
        uid, resource_version = (
            (metadata.get("uid"), metadata.get("resourceVersion"))
            if isinstance(metadata, dict)
            else (None, None)
        )
        if not (isinstance(uid, str) and isinstance(resource_version, str)):
            return decode_job(job)  # not a stored object: nothing names this version
        key = (uid, resource_version)
        prepared = self._decoded.get(key)
        if prepared is None:
            prepared = self._decoded[key] = decode_job(job)
        self._last = (job, prepared)
        return prepared

    def parsed(self, namespace: str, name: str, packed: bytes) -> dict[str, Any]:
        """The job whose JSON a cache holds under `namespace`/`name` as `packed`."""
        key = (namespace, name)
        kept = self._parsed.get(key)
        if kept is None or kept[0] is not packed:
            kept = self._parsed[key] = (packed, orjson.loads(packed))
        return kept[1]

    def __len__(self) -> int:
        return len(self._decoded)
