"""The API client every service uses: in-cluster credentials, else a kubeconfig file."""

from __future__ import annotations

import os

from kubernetes_asyncio import client, config


async def new_api_client(
    kubeconfig: str | None = None, max_connections: int = 100
) -> client.ApiClient:
    """An ApiClient; `kubeconfig` (or $KUBECONFIG) wins over the in-cluster service account."""
    path = kubeconfig or os.environ.get("KUBECONFIG")
    configuration = client.Configuration()
    if path:
        await config.load_kube_config(config_file=path, client_configuration=configuration)
    else:
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    configuration.connection_pool_maxsize = max(1, max_connections)
    return client.ApiClient(configuration)
