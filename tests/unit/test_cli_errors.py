"""The apiserver's refusals as the cluster commands explain them (cli/connection.py): what
happened and what to do, for the answers the control plane of tests/e2e cannot give (no CRD)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from torchjob.cli.connection import CliError, Cluster, Target
from torchjob.kube import errors
from torchjob.kube.client import KubeClient
from torchjob.kube.credentials import Credentials, StaticToken, tls_context


@pytest.fixture
async def cluster() -> AsyncIterator[Cluster]:
    credentials = Credentials("https://cluster.example:6443", tls_context(), StaticToken(None))
    async with KubeClient(credentials) as client:
        yield Cluster(client, Target(kubeconfig="/absent", namespace="team"))


async def explained(cluster: Cluster, error: errors.KubeError, **where: Any) -> str:
    with pytest.raises(CliError) as raised:
        async with cluster.translated(**where):
            raise error
    return raised.value.message


async def test_a_404_without_details_means_the_crd_is_not_installed(cluster: Cluster) -> None:
    error = errors.NotFound(404, "NotFound", "the server could not find the requested resource")
    message = await explained(cluster, error, job="train")
    assert "PyTorchTrainingJob API (batch.tensorstack.dev/v1beta1) is not installed" in message
    assert "https://cluster.example:6443" in message and "helm install" in message


async def test_rbac_refusals_name_the_roles_that_carry_job_rights(cluster: Cluster) -> None:
    body = {"details": {"kind": "pytorchtrainingjobs"}}
    refused = errors.Forbidden(403, "Forbidden", 'user "bob" cannot list ...', body)
    message = await explained(cluster, refused)
    assert message.startswith('the cluster refused: user "bob" cannot list ...')
    assert "in namespace team" in message and "edit and view roles" in message
    nodes = errors.Forbidden(403, "Forbidden", "cannot list nodes", {"details": {"kind": "nodes"}})
    assert "edit and view" not in await explained(cluster, nodes)


async def test_a_webhook_refusal_lists_its_causes(cluster: Cluster) -> None:
    body = {
        "details": {
            "causes": [{"field": "spec.elastic.maxReplicas", "message": "must be at least 2"}]
        }
    }
    refused = errors.Invalid(422, "Invalid", "PyTorchTrainingJob team/j is invalid", body)
    message = await explained(cluster, refused, creating="j")
    assert message.splitlines() == [
        "the cluster refused it: PyTorchTrainingJob team/j is invalid",
        "  spec.elastic.maxReplicas: must be at least 2",
    ]


async def test_expired_credentials(cluster: Cluster) -> None:
    message = await explained(cluster, errors.KubeError(401, "Unauthorized", "Unauthorized"))
    assert "does not accept the credentials" in message
