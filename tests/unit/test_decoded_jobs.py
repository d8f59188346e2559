"""The webhook decodes each stored job once, however many replica pods are admitted against it."""

from __future__ import annotations

from support.jobs import job_manifest

from torchjob.webhook.app import DecodedJobs


def test_the_same_stored_object_is_decoded_once() -> None:
    decoded = DecodedJobs()
    job = job_manifest()
    assert decoded.decode(job) is decoded.decode(job)


def test_a_changed_job_is_decoded_again() -> None:
    decoded = DecodedJobs()
    job = job_manifest()
    first = decoded.decode(job)
    # The informer replaces the cached object on every change; an equal copy is a new version.
    changed = job_manifest()
    changed["spec"]["replicaSpecs"][0]["replicas"] = 7
    second = decoded.decode(changed)
    assert second is not first
    assert second.spec is not None and second.spec.replica_specs is not None
    assert second.spec.replica_specs[0].replicas == 7


def test_memory_is_bounded() -> None:
    decoded = DecodedJobs(capacity=2)
    jobs = [job_manifest() for _ in range(5)]
    for job in jobs:
        decoded.decode(job)
    assert len(decoded) <= 2
    assert decoded.decode(jobs[-1]).metadata == jobs[-1]["metadata"]
