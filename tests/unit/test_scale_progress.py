"""What the scale benches' watches count: pods created, bound and Running, only the replacements
after a restart, and how long a job's status took to show a pod Running."""

from __future__ import annotations

from typing import Any

from support.scale_bench import Progress, StatusTimes, big_job

from torchjob.api import constants


def pod(name: str, uid: str, node: str = "", phase: str = "Pending") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "uid": uid},
        "spec": {"nodeName": node} if node else {},
        "status": {"phase": phase},
    }


def test_every_stage_is_reached_once_all_pods_are_there() -> None:
    progress = Progress(2)
    progress.seen(pod("a", "1"))
    progress.seen(pod("b", "2", node="n"))
    assert "created" in progress.reached and "bound" not in progress.reached
    progress.seen(pod("a", "1", node="n", phase="Running"))
    assert not progress.all_running.is_set()
    progress.seen(pod("b", "2", node="n", phase="Running"))
    assert progress.all_running.is_set()
    assert set(progress.reached) == {"created", "bound", "running"}


def test_a_pod_that_stops_running_no_longer_counts() -> None:
    progress = Progress(2)
    progress.seen(pod("a", "1", node="n", phase="Running"))
    progress.seen(pod("a", "1", node="n", phase="Failed"))
    progress.seen(pod("b", "2", node="n", phase="Running"))
    assert not progress.all_running.is_set()


def test_after_a_restart_only_replacements_count_and_the_old_ones_are_awaited_gone() -> None:
    progress = Progress(2)
    for name, uid in (("a", "1"), ("b", "2")):
        progress.seen(pod(name, uid, node="n", phase="Running"))
    progress.restart()
    assert not progress.all_running.is_set() and not progress.reached
    progress.seen(pod("a", "1", node="n", phase="Failed"))
    assert progress.failed.is_set()
    progress.gone(pod("a", "1"))
    assert not progress.all_gone.is_set()
    progress.gone(pod("b", "2"))
    assert progress.all_gone.is_set()
    for name, uid in (("a", "3"), ("b", "4")):
        progress.seen(pod(name, uid, node="n", phase="Running"))
    assert progress.all_running.is_set()
    assert progress.uids == {"a": "3", "b": "4"}


def test_status_latency_runs_from_the_pod_running_to_the_status_showing_it() -> None:
    times = StatusTimes()
    times.pod_seen(pod("j-worker-0", "1", node="n", phase="Running"))
    times.pod_seen(pod("j-worker-1", "2", node="n"))  # not Running: no start
    job = {
        "status": {
            "tasks": [
                {
                    "replicas": [
                        {"name": "j-worker-0", "phase": "Running"},
                        {"name": "j-worker-1", "phase": "Running"},
                    ]
                }
            ]
        }
    }
    times.job_seen(job)
    (latency,) = times.latencies()
    assert latency >= 0


def test_the_big_job_starts_whole_and_restarts_as_a_gang() -> None:
    job = big_job("big", 5, gpus=1)
    assert job["spec"]["torchrunConfig"]["minNodes"] == 5
    (replica_spec,) = job["spec"]["replicaSpecs"]
    assert replica_spec["replicas"] == 5
    (container,) = replica_spec["template"]["spec"]["containers"]
    assert container["resources"]["limits"] == {"nvidia.com/gpu": "1"}
    annotations = job["metadata"]["annotations"]
    assert annotations[constants.ANNOTATION_RESTART_SCOPE] == constants.RESTART_SCOPE_GANG
