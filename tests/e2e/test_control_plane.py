"""The test control plane is a real, working Kubernetes API: versioned, RBAC-enforcing, with the
garbage collector and service-account controllers running."""

from __future__ import annotations

import asyncio
import re
import secrets
from collections.abc import Awaitable, Callable

import pytest
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.rest import ApiException
from support import ControlPlane
from support.eventually import eventually


async def test_apiserver_reports_the_built_kubernetes_version(
    control_plane: ControlPlane, kube_client: client.ApiClient
) -> None:
    # The build cache directory is named after the version the build script pins.
    built = re.search(r"v\d+\.\d+\.\d+", control_plane.binaries.kube_apiserver.parent.name)
    assert built is not None
    info = await client.VersionApi(kube_client).get_code()
    assert info.git_version == built.group(0)
    assert f"v{info.major}.{info.minor}." in info.git_version


async def test_namespace_fixture_creates_an_active_namespace(
    kube_client: client.ApiClient, namespace: str
) -> None:
    created = await client.CoreV1Api(kube_client).read_namespace(namespace)
    assert created.status.phase == "Active"


async def test_rbac_denies_an_unbound_user_until_bound_to_view(
    control_plane: ControlPlane, kube_client: client.ApiClient, namespace: str
) -> None:
    user = f"tester-{secrets.token_hex(3)}"
    kubeconfig = control_plane.issue_kubeconfig(user)
    async with await config.new_client_from_config(
        config_file=str(kubeconfig), persist_config=False
    ) as user_client:
        user_core = client.CoreV1Api(user_client)
        with pytest.raises(ApiException) as denied:
            await user_core.list_namespaced_pod(namespace)
        assert denied.value.status == 403
        assert await _can_list_pods(control_plane, namespace, user) == "no"

        await _bind_cluster_role(kube_client, namespace, "view", user)

        # The authorizer reads bindings from an informer cache, so allow it to catch up.
        await _wait_until(lambda: _allowed(user_core.list_namespaced_pod(namespace)))
        assert await _can_list_pods(control_plane, namespace, user) == "yes"


async def test_garbage_collector_deletes_dependents_of_a_deleted_owner(
    kube_client: client.ApiClient, namespace: str
) -> None:
    core = client.CoreV1Api(kube_client)
    owner = await core.create_namespaced_config_map(namespace, _config_map("owner"))
    owned_by = client.V1OwnerReference(
        api_version="v1", kind="ConfigMap", name="owner", uid=owner.metadata.uid
    )
    await core.create_namespaced_config_map(namespace, _config_map("dependent", owned_by))

    await core.delete_namespaced_config_map("owner", namespace)

    await _wait_until(
        lambda: _is_not_found(core.read_namespaced_config_map("dependent", namespace)),
        within=30,
    )


async def test_default_service_account_appears_in_a_new_namespace(
    kube_client: client.ApiClient, namespace: str
) -> None:
    core = client.CoreV1Api(kube_client)
    await _wait_until(lambda: _exists(core.read_namespaced_service_account("default", namespace)))


async def test_apiserver_restarts_on_the_same_address_with_the_same_data(
    control_plane: ControlPlane, kube_client: client.ApiClient, namespace: str
) -> None:
    server = control_plane.server
    await asyncio.to_thread(control_plane.stop_apiserver)
    await asyncio.to_thread(control_plane.start_apiserver)

    assert control_plane.server == server
    # The session client keeps working: its pooled connections to the old process are dropped.
    restored = await client.CoreV1Api(kube_client).read_namespace(namespace)
    assert restored.metadata.name == namespace


async def _can_list_pods(control_plane: ControlPlane, namespace: str, user: str) -> str:
    """kubectl's answer ("yes" or "no") for `user`, through admin impersonation."""
    argv = ("auth", "can-i", "list", "pods", "-n", namespace)
    result = await asyncio.to_thread(control_plane.kubectl, *argv, as_user=user, check=False)
    return result.stdout.strip()


async def _bind_cluster_role(
    kube_client: client.ApiClient, namespace: str, cluster_role: str, user: str
) -> None:
    rbac_group = "rbac.authorization.k8s.io"
    binding = client.V1RoleBinding(
        metadata=client.V1ObjectMeta(name=f"{user}-{cluster_role}"),
        role_ref=client.V1RoleRef(api_group=rbac_group, kind="ClusterRole", name=cluster_role),
        subjects=[client.RbacV1Subject(api_group=rbac_group, kind="User", name=user)],
    )
    await client.RbacAuthorizationV1Api(kube_client).create_namespaced_role_binding(
        namespace, binding
    )


def _config_map(name: str, *owners: client.V1OwnerReference) -> client.V1ConfigMap:
    return client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name=name, owner_references=list(owners) or None)
    )


async def _allowed(request: Awaitable[object]) -> bool:
    return await _succeeds_unless(request, status=403)


async def _exists(request: Awaitable[object]) -> bool:
    return await _succeeds_unless(request, status=404)


async def _is_not_found(request: Awaitable[object]) -> bool:
    return not await _exists(request)


async def _succeeds_unless(request: Awaitable[object], status: int) -> bool:
    """Whether `request` succeeds; an API error other than `status` fails the test."""
    try:
        await request
    except ApiException as error:
        if error.status == status:
            return False
        raise
    return True


async def _wait_until(
    condition: Callable[[], Awaitable[bool]], within: float = 10.0, interval: float = 0.2
) -> None:
    await eventually(condition, timeout=within, interval=interval)
