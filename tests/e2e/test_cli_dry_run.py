"""`torchjob run --dry-run` prints what a cluster makes: the same job created on the real control
plane, through the webhook and the reconciler, stores the same defaulted spec and gets the same
Pods and Services, apart from the uid the apiserver assigns and the fields it fills in."""

from __future__ import annotations

import asyncio
import json
import subprocess
from typing import Any

import yaml
from support import ControlPlane
from support.cli import TORCHJOB
from support.eventually import eventually
from support.jobs import job_manifest
from support.processes import ServiceProcess

from torchjob.api import constants
from torchjob.api.progress import ANNOTATION_PROGRESS_CA, ENV_URL
from torchjob.cli.cluster import DRY_RUN_PROGRESS

TIMEOUT = 30.0


def contained(expected: Any, actual: Any, path: str = "") -> list[str]:
    """Where `expected` is not part of `actual`: every key of an object, every item of a list
    (same length, same order) and every scalar must be there; `actual` may have more keys."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        return [
            difference
            for key, value in expected.items()
            for difference in (
                contained(value, actual[key], f"{path}.{key}")
                if key in actual
                else [f"{path}.{key}: missing"]
            )
        ]
    if isinstance(expected, list) and isinstance(actual, list):
        if len(expected) != len(actual):
            return [f"{path}: {len(expected)} items, the cluster has {len(actual)}"]
        return [
            d
            for i, (e, a) in enumerate(zip(expected, actual, strict=True))
            for d in contained(e, a, f"{path}[{i}]")
        ]
    return [] if expected == actual else [f"{path}: {expected!r} != {actual!r}"]


def _progress_endpoint(pod: dict[str, Any]) -> dict[str, str]:
    """The dry run's stand-ins for the progress endpoint, each with what `pod` was given."""
    container = pod["spec"]["containers"][0]
    url = next(e["value"] for e in container["env"] if e["name"] == ENV_URL)
    return {
        DRY_RUN_PROGRESS.base_url: url[: url.index("/apis/")],
        DRY_RUN_PROGRESS.ca_pem: pod["metadata"]["annotations"][ANNOTATION_PROGRESS_CA],
    }


def _without_api_access(obj: dict[str, Any]) -> dict[str, Any]:
    """`obj` without the API token volume the apiserver's ServiceAccount admission adds to a pod
    (`kube-api-access-*`): the cluster's own, not torchjob's."""
    if obj["kind"] != "Pod":
        return obj
    pod: dict[str, Any] = json.loads(json.dumps(obj))
    spec = pod["spec"]
    ours = [v for v in spec.get("volumes", []) if not v["name"].startswith("kube-api-access-")]
    spec["volumes"] = ours
    for container in spec["containers"] + spec.get("initContainers", []):
        mounts = container.get("volumeMounts", [])
        container["volumeMounts"] = [
            m for m in mounts if not m["name"].startswith("kube-api-access-")
        ]
    return pod


def _replaced(document: dict[str, Any], known: dict[str, str]) -> dict[str, Any]:
    text = json.dumps(document)
    for stand_in, value in known.items():
        text = text.replace(json.dumps(stand_in)[1:-1], json.dumps(value)[1:-1])
    replaced: dict[str, Any] = json.loads(text)
    return replaced


async def test_dry_run_matches_what_the_cluster_creates(
    control_plane: ControlPlane, admitted_namespace: str, reconciler: ServiceProcess
) -> None:
    manifest = job_manifest("torchrun", "dry-run-match")
    manifest["spec"]["torchrunConfig"]["procPerNode"] = "2"
    container = manifest["spec"]["replicaSpecs"][0]["template"]["spec"]["containers"][0]
    container["env"] = [{"name": "EXTRA", "value": "x"}]
    text = yaml.safe_dump(manifest)
    dry = await asyncio.to_thread(
        _run, [str(TORCHJOB), "run", "--dry-run", "-n", admitted_namespace, "-"], text
    )
    documents = list(yaml.safe_load_all(dry))
    await asyncio.to_thread(
        control_plane.kubectl, "create", "-n", admitted_namespace, "-f", "-", input=text
    )

    selector = f"{constants.LABEL_JOB_NAME}=dry-run-match"
    pods = await _wait_for(control_plane, admitted_namespace, "pods", selector, 4)
    services = await _wait_for(control_plane, admitted_namespace, "services", selector, 4)
    job = _get(control_plane, admitted_namespace, "ptj", "dry-run-match")
    uid = job["metadata"]["uid"]

    stored = documents[0]
    assert stored["spec"] == job["spec"]  # the webhook's defaults, nothing else
    assert contained(stored["metadata"], job["metadata"]) == []
    dry_uid = documents[1]["metadata"]["ownerReferences"][0]["uid"]
    cluster = {(o["kind"], o["metadata"]["name"]): o for o in [*pods, *services]}
    # What only the cluster knows: the job's uid, and its webhook's progress endpoint and CA.
    known = {dry_uid: uid, **_progress_endpoint(pods[0])}
    rendered = [_replaced(d, known) for d in documents[1:]]
    assert {(d["kind"], d["metadata"]["name"]) for d in rendered} == set(cluster)
    for document in rendered:
        real = _without_api_access(cluster[(document["kind"], document["metadata"]["name"])])
        assert contained(document, real) == [], document["metadata"]["name"]
    pod = next(d for d in rendered if d["kind"] == "Pod")
    env = {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}
    assert env["PET_RDZV_ID"] == uid and env["EXTRA"] == "x"


def _run(argv: list[str], text: str) -> str:
    result = subprocess.run(
        argv, input=text, capture_output=True, text=True, timeout=60, check=True
    )
    return result.stdout


def _get(control_plane: ControlPlane, namespace: str, *what: str) -> dict[str, Any]:
    result = control_plane.kubectl("get", *what, "-n", namespace, "-o", "json")
    data: dict[str, Any] = json.loads(result.stdout)
    return data


async def _wait_for(
    control_plane: ControlPlane, namespace: str, kind: str, selector: str, count: int
) -> list[dict[str, Any]]:
    seen: list[dict[str, Any]] = []

    async def counted() -> bool:
        listed = await asyncio.to_thread(_get, control_plane, namespace, kind, "-l", selector)
        seen[:] = listed["items"]
        return len(seen) == count

    await eventually(
        counted, f"{count} {kind}", timeout=TIMEOUT, interval=0.2, explain=lambda: len(seen)
    )
    return seen
