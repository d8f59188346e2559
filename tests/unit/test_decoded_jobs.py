"""The webhook decodes each stored job once, however many replica pods are admitted against it."""

from __future__ import annotations

import uuid
from typing import Any

import orjson
from support.jobs import job_manifest

from torchjob.webhook.admission.job_cache import DecodedJobs


def stored_job(resource_version: str = "1", uid: str | None = None) -> dict[str, Any]:
    job = job_manifest()
    job["metadata"].update(uid=uid or str(uuid.uuid4()), resourceVersion=resource_version)
    return job


def test_the_same_stored_version_is_decoded_once() -> None:
    decoded = DecodedJobs()
    job = stored_job()
    # The cache hands out a fresh copy on every read: the version, not the object, is the key.
    copy = {**job, "metadata": dict(job["metadata"])}
    assert decoded.decode(job) is decoded.decode(copy)


def test_an_object_that_names_no_version_is_decoded_every_time() -> None:
    decoded = DecodedJobs()
    job = job_manifest()
    assert decoded.decode(job) is not decoded.decode(job)
    assert len(decoded) == 0


def test_a_changed_job_is_decoded_again() -> None:
    decoded = DecodedJobs()
    job = stored_job("1")
    first = decoded.decode(job)
    changed = stored_job("2", uid=job["metadata"]["uid"])
    changed["spec"]["replicaSpecs"][0]["replicas"] = 7
    second = decoded.decode(changed)
    assert second is not first
    assert second.job.spec is not None and second.job.spec.replica_specs is not None
    assert second.job.spec.replica_specs[0].replicas == 7


def test_memory_is_bounded_keeping_the_most_recently_used() -> None:
    decoded = DecodedJobs(capacity=2)
    jobs = [stored_job() for _ in range(5)]
    first = decoded.decode(jobs[0])
    for job in jobs[1:]:
        decoded.decode(job)
        assert decoded.decode(jobs[0]) is first  # used again each time: never the one dropped
    assert len(decoded) == 2
    assert decoded.decode(jobs[-1]).job.metadata == jobs[-1]["metadata"]


def test_the_same_cached_json_is_parsed_once_and_a_new_one_again() -> None:
    decoded = DecodedJobs(parsed_capacity=2)
    job = stored_job("1")
    packed = orjson.dumps(job)
    first = decoded.parsed("ns", "a", packed)
    assert first == job
    assert decoded.parsed("ns", "a", packed) is first
    # The informer stores an updated job as new bytes: equal bytes or not, they are parsed anew.
    changed = stored_job("2", uid=job["metadata"]["uid"])
    again = decoded.parsed("ns", "a", orjson.dumps(changed))
    assert again is not first
    assert again == changed


def test_parsed_jobs_are_bounded_keeping_the_most_recently_used() -> None:
    decoded = DecodedJobs(parsed_capacity=2)
    packed = {name: orjson.dumps(stored_job()) for name in "abcd"}
    kept = decoded.parsed("ns", "a", packed["a"])
    first: dict[str, Any] = {}
    for name in "bcd":
        first[name] = decoded.parsed("ns", name, packed[name])
        assert decoded.parsed("ns", "a", packed["a"]) is kept  # used again each time
    # "a" and "d" are kept: asked again, each is the same object; "b" went, so it is parsed anew.
    assert decoded.parsed("ns", "d", packed["d"]) is first["d"]
    assert decoded.parsed("ns", "a", packed["a"]) is kept
    assert decoded.parsed("ns", "b", packed["b"]) is not first["b"]
