"""The `torchjob` cluster commands on a job of another API than PyTorchTrainingJob's, as users
run them: a TrainJob, made from a runtime of its namespace and admitted by the webhook, is listed
beside the namespace's PyTorchTrainingJobs as `trainjob/NAME`, described and deleted by that
name. No reconciler runs TrainJobs here (tests/e2e/test_trainjob.py runs them): the job stays
as Trainer shows a job not started."""

from __future__ import annotations

import asyncio
import copy
import json
import os
import subprocess

from support import ControlPlane
from support.cli import TORCHJOB
from support.trainer import TORCH_RUNTIME, TRAIN_JOB


async def torchjob(
    control_plane: ControlPlane, namespace: str, *args: str
) -> subprocess.CompletedProcess[str]:
    """`torchjob --kubeconfig ... -n NAMESPACE ARGS` (the cluster flags before the verb, so
    that none follows a job's command), its output captured."""
    cluster = [f"--kubeconfig={control_plane.kubeconfig}", f"--namespace={namespace}"]
    return await asyncio.to_thread(
        subprocess.run,
        [str(TORCHJOB), *cluster, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "KUBECONFIG": ""},
    )


async def ok(control_plane: ControlPlane, namespace: str, *args: str) -> str:
    result = await torchjob(control_plane, namespace, *args)
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    return result.stdout


async def test_a_trainjob_is_listed_described_and_deleted_as_kind_slash_name(
    control_plane: ControlPlane, admitted_namespace: str
) -> None:
    namespace = admitted_namespace
    runtime = copy.deepcopy(TORCH_RUNTIME)
    runtime["kind"] = "TrainingRuntime"
    job = copy.deepcopy(TRAIN_JOB)
    job["metadata"] = {"name": "mnist"}
    job["spec"]["runtimeRef"] = {
        "name": runtime["metadata"]["name"],
        "kind": runtime["kind"],
        "apiGroup": "trainer.kubeflow.org",
    }
    for manifest in (runtime, job):
        await asyncio.to_thread(
            control_plane.kubectl, "create", "-n", namespace, "-f", "-", input=json.dumps(manifest)
        )
    await ok(control_plane, namespace, "submit", "--name", "train", "--image", "i", "--", "t.py")

    listed = await ok(control_plane, namespace, "list")
    assert [line.split()[0] for line in listed.splitlines()] == ["NAME", "train", "trainjob/mnist"]
    named = await ok(control_plane, namespace, "list", "-o", "name")
    assert named == "train\ntrainjob/mnist\n"
    described = await ok(control_plane, namespace, "get", "TrainJob/mnist")
    assert "Kind:        TrainJob (trainer.kubeflow.org/v1alpha1)" in described
    missing = await torchjob(control_plane, namespace, "get", "mnist")
    assert missing.returncode == 2 and "did you mean trainjob/mnist?" in missing.stderr
    unknown = await torchjob(control_plane, namespace, "get", "tfjob/mnist")
    assert unknown.returncode == 2 and "unknown kind 'tfjob'" in unknown.stderr

    deleted = await ok(control_plane, namespace, "delete", "trainjobs/mnist", "--wait")
    assert deleted == "trainjob.trainer.kubeflow.org/mnist deleted\n"
    listed = await ok(control_plane, namespace, "list", "-o", "name")
    assert listed == "train\n"
