"""The cluster of the current kubeconfig context, as the `torchjob` cluster commands reach it: the
API client (`--kubeconfig`, `--context`, `-n`, `-A`), every call they make, objects as plain JSON
dicts, and each failure turned into a message that says what to do."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.config.config_exception import ConfigException
from kubernetes_asyncio.config.kube_config import KUBE_CONFIG_DEFAULT_LOCATION

from torchjob.api import constants, types
from torchjob.cli import api_errors
from torchjob.kube import errors
from torchjob.views.cli.tables import similar_names

FIELD_MANAGER = "torchjob-cli"
# Seconds to connect, and to wait for each read of an answer: an apiserver that does not answer
# is reported rather than waited for (a followed log may be silent for as long as it likes).
CONNECT_TIMEOUT = 15
READ_TIMEOUT = 60
TIMEOUTS = (CONNECT_TIMEOUT, READ_TIMEOUT)
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
    try:
        contexts, active = config.list_kube_config_contexts(config_file=kubeconfig_path(target))
    except (ConfigException, OSError, TypeError):
        return None
    chosen = next((c for c in contexts if c.get("name") == target.context), None)
    chosen = chosen or (active if target.context is None else None)
    namespace = ((chosen or {}).get("context") or {}).get("namespace")
    return namespace if isinstance(namespace, str) and namespace else None


class Cluster:
    """The API calls of the `torchjob` commands, in one namespace (or all, with -A)."""

    def __init__(self, api: client.ApiClient, target: Target, host: str) -> None:
        self.api = api
        self.target = target
        self.host = host
        self.objects = client.CustomObjectsApi(api)
        self.core = client.CoreV1Api(api)
        self.namespace = target.namespace or context_namespace(target) or DEFAULT_NAMESPACE

    # -- jobs --------------------------------------------------------------------------------

    async def get_job(self, name: str) -> dict[str, Any]:
        async with self.translated(job=name):
            job: dict[str, Any] = await self.objects.get_namespaced_custom_object(
                types.GROUP,
                types.VERSION,
                self.namespace,
                types.PLURAL,
                name,
                _request_timeout=TIMEOUTS,
            )
        return job

    async def list_jobs(self, *, all_namespaces: bool | None = None) -> list[dict[str, Any]]:
        everywhere = self.target.all_namespaces if all_namespaces is None else all_namespaces
        async with self.translated():
            if everywhere:
                listed = await self.objects.list_cluster_custom_object(
                    types.GROUP, types.VERSION, types.PLURAL, _request_timeout=TIMEOUTS
                )
            else:
                listed = await self.objects.list_namespaced_custom_object(
                    types.GROUP,
                    types.VERSION,
                    self.namespace,
                    types.PLURAL,
                    _request_timeout=TIMEOUTS,
                )
        items: list[dict[str, Any]] = listed.get("items") or []
        return items

    async def create_job(self, manifest: dict[str, Any]) -> dict[str, Any]:
        name = str((manifest.get("metadata") or {}).get("name") or "")
        async with self.translated(creating=name):
            created: dict[str, Any] = await self.objects.create_namespaced_custom_object(
                types.GROUP,
                types.VERSION,
                self.namespace,
                types.PLURAL,
                manifest,
                field_manager=FIELD_MANAGER,
                _request_timeout=TIMEOUTS,
            )
        return created

    async def patch_job(self, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        """A JSON merge patch of the job, written by our field manager."""
        call: Any = self.objects.patch_namespaced_custom_object  # the stubs omit _content_type
        async with self.translated(job=name):
            patched: dict[str, Any] = await call(
                types.GROUP,
                types.VERSION,
                self.namespace,
                types.PLURAL,
                name,
                patch,
                field_manager=FIELD_MANAGER,
                _content_type="application/merge-patch+json",
                _request_timeout=TIMEOUTS,
            )
        return patched

    async def delete_job(self, name: str) -> None:
        async with self.translated(job=name):
            await self.objects.delete_namespaced_custom_object(
                types.GROUP,
                types.VERSION,
                self.namespace,
                types.PLURAL,
                name,
                propagation_policy="Background",
                _request_timeout=TIMEOUTS,
            )

    # -- what jobs own, and the nodes -------------------------------------------------------

    async def job_pods(
        self, job: str | None = None, *, all_namespaces: bool | None = None
    ) -> list[dict[str, Any]]:
        """The replica pods of `job`, or of every job (in the namespace, or everywhere)."""
        selector = constants.LABEL_JOB_NAME + (f"={job}" if job else "")
        return await self.pods(selector, all_namespaces=all_namespaces)

    async def pods(
        self, selector: str = "", *, all_namespaces: bool | None = None, field: str = ""
    ) -> list[dict[str, Any]]:
        everywhere = self.target.all_namespaces if all_namespaces is None else all_namespaces
        if everywhere:
            listed = await self.raw(
                self.core.list_pod_for_all_namespaces,
                label_selector=selector,
                field_selector=field,
            )
        else:
            listed = await self.raw(
                self.core.list_namespaced_pod,
                self.namespace,
                label_selector=selector,
                field_selector=field,
            )
        return list(listed.get("items") or [])

    async def get_pod(self, name: str) -> dict[str, Any] | None:
        try:
            pod: dict[str, Any] = await self.raw(
                self.core.read_namespaced_pod, name, self.namespace
            )
            return pod
        except CliError as error:
            if isinstance(error.__cause__, errors.NotFound):
                return None
            raise

    async def events(self) -> list[dict[str, Any]]:
        listed = await self.raw(self.core.list_namespaced_event, self.namespace)
        return list(listed.get("items") or [])

    async def nodes(self) -> list[dict[str, Any]]:
        listed = await self.raw(self.core.list_node)
        return list(listed.get("items") or [])

    async def metrics(self, plural: str) -> list[dict[str, Any]] | None:
        """metrics-server's node or pod metrics; None when it is not installed (or refuses)."""
        try:
            if plural == "pods" and not self.target.all_namespaces:
                listed = await self.objects.list_namespaced_custom_object(
                    "metrics.k8s.io", "v1beta1", self.namespace, plural, _request_timeout=TIMEOUTS
                )
            else:
                listed = await self.objects.list_cluster_custom_object(
                    "metrics.k8s.io", "v1beta1", plural, _request_timeout=TIMEOUTS
                )
        except (ApiException, aiohttp.ClientError, TimeoutError):
            return None
        return list(listed.get("items") or [])

    async def service(self, name: str) -> dict[str, Any] | None:
        try:
            service: dict[str, Any] = await self.raw(
                self.core.read_namespaced_service, name, self.namespace
            )
            return service
        except CliError as error:
            if isinstance(error.__cause__, errors.NotFound):
                return None
            raise

    async def pod_log(self, pod: str, **options: Any) -> aiohttp.ClientResponse:
        """The open response of a pod's log (the caller reads and closes it)."""
        async with self.translated(pod=pod):
            call: Any = self.core.read_namespaced_pod_log
            timeouts = (CONNECT_TIMEOUT, None) if options.get("follow") else TIMEOUTS
            response: aiohttp.ClientResponse = await call(
                pod, self.namespace, _preload_content=False, _request_timeout=timeouts, **options
            )
            if not 200 <= response.status <= 299:
                data = await response.read()
                response.release()
                raise _refusal(response, data)
        return response

    async def raw(self, method: Callable[..., Awaitable[Any]], *args: Any, **kw: Any) -> Any:
        """A call whose answer is read as plain JSON, as the apiserver wrote it (the client's
        models would rename fields and refuse some that real servers send)."""
        async with self.translated():
            response = await method(*args, _preload_content=False, _request_timeout=TIMEOUTS, **kw)
            data = await response.read()
            response.release()
            if not 200 <= response.status <= 299:
                raise _refusal(response, data)
        return orjson.loads(data)

    # -- errors ------------------------------------------------------------------------------

    @asynccontextmanager
    async def translated(
        self, *, job: str | None = None, creating: str | None = None, pod: str | None = None
    ) -> AsyncIterator[None]:
        try:
            async with api_errors.translated():
                yield
        except errors.KubeError as error:
            raise await self._explain(error, job=job, creating=creating, pod=pod) from error
        except (aiohttp.ClientError, OSError, TimeoutError) as error:
            raise CliError(
                f"cannot reach the cluster at {self.host}: {error or type(error).__name__}. "
                "Check that it is up and that --kubeconfig / --context (or $KUBECONFIG) point "
                "at it: kubectl cluster-info"
            ) from error

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
    """A kubeconfig that is not there is said plainly (the client's message names a key)."""
    chosen = path or os.path.expanduser(KUBE_CONFIG_DEFAULT_LOCATION)
    if not os.path.exists(chosen) and not os.environ.get("KUBERNETES_SERVICE_HOST"):
        raise CliError(
            f"no cluster to talk to: the kubeconfig {chosen} does not exist. Give "
            "--kubeconfig FILE (or set $KUBECONFIG) for the cluster's kubeconfig"
        )


def _refusal(response: aiohttp.ClientResponse, data: bytes) -> ApiException:
    error = ApiException(status=response.status, reason=response.reason)
    error.body = data
    return error


@asynccontextmanager
async def connect(target: Target) -> AsyncIterator[Cluster]:
    """The cluster of `target`'s kubeconfig and context; the client is closed on the way out."""
    configuration = client.Configuration()
    path = kubeconfig_path(target)
    _require_kubeconfig(path)
    try:
        await config.load_kube_config(
            config_file=path, context=target.context, client_configuration=configuration
        )
    except (ConfigException, OSError) as error:
        if path is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
            config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        else:
            raise CliError(
                f"no cluster to talk to: {error}. Give --kubeconfig FILE (or set $KUBECONFIG), "
                "and --context NAME to choose one of its contexts (kubectl config get-contexts)"
            ) from error
    api = client.ApiClient(configuration)
    try:
        yield Cluster(api, target, str(configuration.host))
    finally:
        await api.close()
