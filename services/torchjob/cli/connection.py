"""The cluster of the current kubeconfig context, as the `torchjob` cluster commands reach it: the
client (`--kubeconfig`, `--context`, `-n`, `-A`), every call they make, objects as plain JSON
dicts, and each failure turned into a message that says what to do.

The calls are the services' own: our client (kube/client.py) by the REST paths of
kube/resources.py, every segment quoted, its failures our KubeErrors (kube/errors.py), and the
credentials of kube/kubeconfig.py (kubernetes-asyncio loads only a kubeconfig whose user runs an
exec plugin or an auth provider). `tensorboard` and `console` forward with kubectl
(cli/port_forward.py)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson

from torchjob.api import types
from torchjob.api.constants import LABEL_JOB_NAME
from torchjob.kube import errors, kubeconfig
from torchjob.kube.client import KubeClient
from torchjob.kube.credentials import ConfigError, Credentials, in_cluster
from torchjob.kube.informer import ResourceKind
from torchjob.kube.resources import (
    CORE_EVENTS,
    JOBS,
    NODE_METRICS,
    NODES,
    POD_METRICS,
    PODS,
    SERVICES,
)
from torchjob.kube.rest import MERGE_PATCH
from torchjob.views.cli.tables import similar_names

FIELD_MANAGER = "torchjob-cli"
WRITTEN_BY_US: Mapping[str, str] = {"fieldManager": FIELD_MANAGER}
# Seconds to connect, and to wait for each read of an answer: an apiserver that does not answer
# is reported rather than waited for (a followed log may be silent for as long as it likes).
CONNECT_TIMEOUT = 15.0
READ_TIMEOUT = 60.0
DEFAULT_NAMESPACE = "default"
EXIT_ERROR = 2


class CliError(Exception):
    """A failure the user can act on: `message` says what happened and what to do."""

    def __init__(self, message: str, code: int = EXIT_ERROR) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


@dataclass(frozen=True, slots=True)
class Target:
    """Where the command goes, as given on the command line."""

    kubeconfig: str | None = None
    context: str | None = None
    namespace: str | None = None
    all_namespaces: bool = False


def kubeconfig_path(target: Target) -> str | None:
    return target.kubeconfig or os.environ.get("KUBECONFIG", "").split(os.pathsep)[0] or None


def context_namespace(target: Target) -> str | None:
    """The namespace the kubeconfig's context names, if it names one."""
    path = kubeconfig_path(target) or kubeconfig.DEFAULT_PATH
    return kubeconfig.context_namespace(path, target.context)


class Cluster:
    """The API calls of the `torchjob` commands, in one namespace (or all, with -A)."""

    def __init__(self, client: KubeClient, target: Target) -> None:
        self.client = client
        self.target = target
        self.host = client.host
        self.namespace = target.namespace or context_namespace(target) or DEFAULT_NAMESPACE

    def scope(self, all_namespaces: bool | None = None) -> str | None:
        """The namespace to list in; None for every namespace (-A, unless told otherwise)."""
        everywhere = self.target.all_namespaces if all_namespaces is None else all_namespaces
        return None if everywhere else self.namespace

    # -- jobs --------------------------------------------------------------------------------

    async def get_job(self, name: str) -> dict[str, Any]:
        async with self.translated(job=name):
            job: dict[str, Any] = await self.client.request_json(
                "GET", JOBS.object_path(self.namespace, name)
            )
        return job

    async def list_jobs(self, *, all_namespaces: bool | None = None) -> list[dict[str, Any]]:
        return await self._items(JOBS, self.scope(all_namespaces))

    async def create_job(self, manifest: dict[str, Any]) -> dict[str, Any]:
        name = str((manifest.get("metadata") or {}).get("name") or "")
        async with self.translated(creating=name):
            created: dict[str, Any] = await self.client.request_json(
                "POST", JOBS.path(self.namespace), query=WRITTEN_BY_US, body=manifest
            )
        return created

    async def patch_job(self, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        """A JSON merge patch of the job, written by our field manager."""
        async with self.translated(job=name):
            patched: dict[str, Any] = await self.client.request_json(
                "PATCH",
                JOBS.object_path(self.namespace, name),
                query=WRITTEN_BY_US,
                body=patch,
                content_type=MERGE_PATCH,
            )
        return patched

    async def delete_job(self, name: str) -> None:
        async with self.translated(job=name):
            await self.client.request(
                "DELETE",
                JOBS.object_path(self.namespace, name),
                query={"propagationPolicy": "Background"},
            )

    # -- what jobs own, and the nodes -------------------------------------------------------

    async def job_pods(
        self, job: str | None = None, *, all_namespaces: bool | None = None
    ) -> list[dict[str, Any]]:
        """The replica pods of `job`, or of every job (in the namespace, or everywhere)."""
        selector = LABEL_JOB_NAME + (f"={job}" if job else "")
        return await self.pods(selector, all_namespaces=all_namespaces)

    async def pods(
        self, selector: str = "", *, all_namespaces: bool | None = None, field: str = ""
    ) -> list[dict[str, Any]]:
        chosen = {"labelSelector": selector, "fieldSelector": field}
        query = {key: value for key, value in chosen.items() if value}
        return await self._items(PODS, self.scope(all_namespaces), query)

    async def get_pod(self, name: str) -> dict[str, Any] | None:
        return await self._object_or_none(PODS, name)

    async def events(self) -> list[dict[str, Any]]:
        return await self._items(CORE_EVENTS, self.namespace)

    async def nodes(self) -> list[dict[str, Any]]:
        return await self._items(NODES, None)

    async def node_metrics(self) -> list[dict[str, Any]] | None:
        """metrics-server's node metrics; None when it is not installed (or refuses)."""
        return await self._metrics(NODE_METRICS, None)

    async def pod_metrics(self) -> list[dict[str, Any]] | None:
        """metrics-server's pod metrics, in the namespace (or everywhere, with -A); None when it
        is not installed (or refuses)."""
        return await self._metrics(POD_METRICS, self.scope())

    async def service(self, name: str) -> dict[str, Any] | None:
        return await self._object_or_none(SERVICES, name)

    @asynccontextmanager
    async def pod_log(
        self, pod: str, query: Mapping[str, str]
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        """The open answer of a pod's log (its body the caller's to read), with the apiserver's
        log options in `query`; a followed log may be silent for as long as it likes."""
        read_seconds = None if query.get("follow") == "true" else READ_TIMEOUT
        path = PODS.object_path(self.namespace, pod, "log")
        async with (
            self.translated(pod=pod),
            self.client.open("GET", path, query=query, read_seconds=read_seconds) as response,
        ):
            if response.status >= 300:
                raise errors.from_status(response.status, response.reason, await response.read())
            yield response

    async def _items(
        self, kind: ResourceKind, namespace: str | None, query: Mapping[str, str] | None = None
    ) -> list[dict[str, Any]]:
        """The objects of a list, as the apiserver wrote them."""
        async with self.translated():
            listed = await self.client.request_json("GET", kind.path(namespace), query=query)
        return list(listed.get("items") or [])

    async def _object_or_none(self, kind: ResourceKind, name: str) -> dict[str, Any] | None:
        async with self.translated():
            try:
                found: dict[str, Any] = await self.client.request_json(
                    "GET", kind.object_path(self.namespace, name)
                )
            except errors.NotFound:
                return None
        return found

    async def _metrics(
        self, kind: ResourceKind, namespace: str | None
    ) -> list[dict[str, Any]] | None:
        try:
            listed = await self.client.request_json("GET", kind.path(namespace))
        except (errors.KubeError, aiohttp.ClientError, OSError, TimeoutError, ValueError):
            return None
        return list(listed.get("items") or [])

    # -- errors ------------------------------------------------------------------------------

    @asynccontextmanager
    async def translated(
        self, *, job: str | None = None, creating: str | None = None, pod: str | None = None
    ) -> AsyncIterator[None]:
        try:
            yield
        except errors.KubeError as error:
            raise await self._explain(error, job=job, creating=creating, pod=pod) from error
        except (aiohttp.ClientError, OSError, TimeoutError) as error:
            raise CliError(
                f"cannot reach the cluster at {self.host}: {error or type(error).__name__}. "
                "Check that it is up and that --kubeconfig / --context (or $KUBECONFIG) point "
                "at it: kubectl cluster-info"
            ) from error
        except orjson.JSONDecodeError as error:
            raise CliError(
                f"the server at {self.host} answered with something that is not the Kubernetes "
                "API's JSON: check that --kubeconfig / --context point at an apiserver"
            ) from error
        except ValueError as error:  # a name that cannot be a segment of a path ("..")
            raise CliError(f"not a name: {error}") from error

    async def _explain(
        self,
        error: errors.KubeError,
        *,
        job: str | None,
        creating: str | None,
        pod: str | None,
    ) -> CliError:
        details = error.body.get("details") or {}
        where = "every namespace" if self.target.all_namespaces else f"namespace {self.namespace}"
        if isinstance(error, errors.NotFound):
            if details.get("kind") == types.PLURAL or (job and details.get("name") == job):
                return await self._job_not_found(job or str(details.get("name")))
            if pod and details.get("name") == pod:
                return CliError(f"pod {self.namespace}/{pod} does not exist (any more)")
            if not details:
                return CliError(
                    f"the PyTorchTrainingJob API ({types.API_VERSION}) is not installed in the "
                    f"cluster at {self.host}: install the operator (helm install torchjob "
                    "charts/torchjob), or check --context"
                )
            return CliError(f"not found: {error.message}")
        if isinstance(error, errors.Forbidden) and error.reason == "Forbidden":
            hint = ""
            if details.get("kind") == types.PLURAL or job is not None or creating is not None:
                hint = (
                    " (the chart aggregates PyTorchTrainingJob rights into the edit and view roles)"
                )
            return CliError(
                f"the cluster refused: {error.message}. Ask an administrator for a role that "
                f"allows it in {where}{hint}, or use --context for another identity"
            )
        if isinstance(error, errors.Conflict) and creating:
            return CliError(
                f"job {self.namespace}/{creating} already exists: choose another --name, or "
                f"delete it first (torchjob delete {creating} -n {self.namespace})"
            )
        if isinstance(error, errors.Invalid | errors.Forbidden) or error.status == 400:
            causes = details.get("causes") or []
            lines = [f"the cluster refused it: {error.message}"]
            lines += [
                f"  {c.get('field', '')}: {c.get('message', '')}" for c in causes if c.get("field")
            ]
            return CliError("\n".join(lines))
        if error.status == 401:
            return CliError(
                f"the cluster at {self.host} does not accept the credentials of this kubeconfig "
                "(401 Unauthorized): log in again or check --context"
            )
        return CliError(f"the cluster answered {error}")

    async def _job_not_found(self, name: str) -> CliError:
        try:
            names = [str(j["metadata"]["name"]) for j in await self.list_jobs(all_namespaces=False)]
        except CliError:
            names = []
        message = f'job "{name}" not found in namespace {self.namespace}'
        close = similar_names(name, names)
        if close:
            message += "; did you mean " + " or ".join(close) + "?"
        elif names:
            message += f"; its jobs: {', '.join(sorted(names)[:10])}"
        else:
            message += " (it has no jobs; -A lists every namespace's)"
        return CliError(message)


def _require_kubeconfig(path: str | None) -> None:
    """A kubeconfig that is not there is said plainly (the reader's message names a key)."""
    chosen = os.path.expanduser(path or kubeconfig.DEFAULT_PATH)
    if not os.path.exists(chosen) and not os.environ.get("KUBERNETES_SERVICE_HOST"):
        raise CliError(
            f"no cluster to talk to: the kubeconfig {chosen} does not exist. Give "
            "--kubeconfig FILE (or set $KUBECONFIG) for the cluster's kubeconfig"
        )


async def credentials_of(target: Target) -> Credentials:
    """The credentials of `target`'s kubeconfig and context; in a pod without a kubeconfig, the
    pod's ServiceAccount."""
    path = kubeconfig_path(target)
    _require_kubeconfig(path)
    try:
        return await _kubeconfig_or_pod(path, target.context)
    except (ConfigError, OSError, ValueError) as error:
        raise CliError(
            f"no cluster to talk to: {error}. Give --kubeconfig FILE (or set $KUBECONFIG), "
            "and --context NAME to choose one of its contexts (kubectl config get-contexts)"
        ) from error


async def _kubeconfig_or_pod(path: str | None, context: str | None) -> Credentials:
    try:
        return await kubeconfig.load(path or kubeconfig.DEFAULT_PATH, context)
    except (ConfigError, OSError, ValueError):
        if path is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
            return in_cluster()
        raise


@asynccontextmanager
async def connect(target: Target) -> AsyncIterator[Cluster]:
    """The cluster of `target`'s kubeconfig and context; the client is closed on the way out."""
    client = KubeClient(
        await credentials_of(target),
        connect_seconds=CONNECT_TIMEOUT,
        read_seconds=READ_TIMEOUT,
    )
    try:
        yield Cluster(client, target)
    finally:
        await client.close()
