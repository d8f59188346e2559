"""The cluster of the current kubeconfig context, as the `torchjob` cluster commands reach it: the
client (`--kubeconfig`, `--context`, `-n`, `-A`), every call they make (on jobs of any API a job
may be written in, api/job_api.py), objects as plain JSON dicts, and each failure turned into a
message that says what to do.

The calls are the services' own: our client (kube/client.py) by the REST paths of
kube/resources.py, every segment quoted, its failures our KubeErrors (kube/errors.py), and the
credentials of kube/kubeconfig.py (kubernetes-asyncio loads only a kubeconfig whose user runs an
exec plugin or an auth provider). `tensorboard` and `console` forward with kubectl
(cli/port_forward.py)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Final

import aiohttp
import orjson

from torchjob.api.constants import LABEL_JOB_NAME
from torchjob.api.job_api import JOB_APIS, TRAINING_JOB, JobApi
from torchjob.kube import errors, kubeconfig
from torchjob.kube.client import KubeClient
from torchjob.kube.credentials import ConfigError, Credentials, in_cluster
from torchjob.kube.informer import ResourceKind
from torchjob.kube.resources import (
    CORE_EVENTS,
    NODE_METRICS,
    NODES,
    POD_METRICS,
    PODS,
    SERVICES,
    job_resource,
)
from torchjob.kube.rest import MERGE_PATCH
from torchjob.render.job_kinds import kind_of
from torchjob.views.cli.job_reference import shown
from torchjob.views.cli.tables import listed_name, similar_names

FIELD_MANAGER = "torchjob-cli"
WRITTEN_BY_US: Mapping[str, str] = {"fieldManager": FIELD_MANAGER}
# Seconds to connect, and to wait for each read of an answer: an apiserver that does not answer
# is reported rather than waited for (a followed log may be silent for as long as it likes).
CONNECT_TIMEOUT = 15.0
READ_TIMEOUT = 60.0
DEFAULT_NAMESPACE = "default"
EXIT_ERROR = 2
# The resources of jobs, as a refusal's details name them.
JOB_PLURALS: Final = frozenset(api.plural for api in JOB_APIS)


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

    async def get_job(self, name: str, api: JobApi = TRAINING_JOB) -> dict[str, Any]:
        async with self.translated(job=name, api=api):
            job: dict[str, Any] = await self.client.request_json(
                "GET", job_resource(api).object_path(self.namespace, name)
            )
        return job

    async def list_jobs(
        self, api: JobApi = TRAINING_JOB, *, all_namespaces: bool | None = None
    ) -> list[dict[str, Any]]:
        async with self.translated(api=api):
            return await self._listed(api, self.scope(all_namespaces))

    async def list_every_kind(self, *, all_namespaces: bool | None = None) -> JobListing:
        """The jobs of every API the cluster serves: torchjob's own (whose refusal is the
        command's error), then those of each opt-in API whose CRD is installed. An opt-in API
        whose list answers 404 is not installed, and skipped; one whose list is refused is left
        out, saying why in `refused` (a user may read one API's jobs and not another's)."""
        listing = JobListing()
        for api in JOB_APIS:
            if kind_of(api).opt_in is None:
                listing.jobs += await self.list_jobs(api, all_namespaces=all_namespaces)
                listing.served.append(api)
                continue
            async with self.translated(api=api):
                try:
                    listing.jobs += await self._listed(api, self.scope(all_namespaces))
                except errors.NotFound:
                    continue
                except errors.Forbidden as error:
                    refusal = f"{api.kind}s left out: the cluster refused: {error.message}"
                    listing.refused.append(refusal)
                    continue
                listing.served.append(api)
        return listing

    async def _listed(self, api: JobApi, namespace: str | None) -> list[dict[str, Any]]:
        """The jobs of `api`, each with its apiVersion and kind, which say what it is to the
        code that reads it (`api_of`)."""
        listed = await self.client.request_json("GET", job_resource(api).path(namespace))
        stamp = {"apiVersion": api.api_version, "kind": api.kind}
        return [{**stamp, **item} for item in listed.get("items") or []]

    async def create_job(
        self, manifest: dict[str, Any], api: JobApi = TRAINING_JOB
    ) -> dict[str, Any]:
        name = str((manifest.get("metadata") or {}).get("name") or "")
        async with self.translated(creating=name, api=api):
            created: dict[str, Any] = await self.client.request_json(
                "POST",
                job_resource(api).path(self.namespace),
                query=WRITTEN_BY_US,
                body=manifest,
            )
        return created

    async def patch_job(
        self, name: str, patch: dict[str, Any], api: JobApi = TRAINING_JOB
    ) -> dict[str, Any]:
        """A JSON merge patch of the job, written by our field manager."""
        async with self.translated(job=name, api=api):
            patched: dict[str, Any] = await self.client.request_json(
                "PATCH",
                job_resource(api).object_path(self.namespace, name),
                query=WRITTEN_BY_US,
                body=patch,
                content_type=MERGE_PATCH,
            )
        return patched

    async def delete_job(self, name: str, api: JobApi = TRAINING_JOB) -> None:
        async with self.translated(job=name, api=api):
            await self.client.request(
                "DELETE",
                job_resource(api).object_path(self.namespace, name),
                query={"propagationPolicy": "Background"},
            )

    # -- what jobs own, and the nodes -------------------------------------------------------

    async def job_pods(
        self,
        job: str | None = None,
        api: JobApi = TRAINING_JOB,
        *,
        all_namespaces: bool | None = None,
    ) -> list[dict[str, Any]]:
        """The replica pods of `job` of `api`, or of every job (in the namespace, or
        everywhere). Every API's replica pods carry our job-name label; those of a job of
        another API with the same name are told apart by their controller."""
        selector = LABEL_JOB_NAME + (f"={job}" if job else "")
        pods = await self.pods(selector, all_namespaces=all_namespaces)
        return pods if job is None else [pod for pod in pods if _controlled_by(pod, api)]

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
        self,
        *,
        job: str | None = None,
        api: JobApi = TRAINING_JOB,
        creating: str | None = None,
        pod: str | None = None,
    ) -> AsyncIterator[None]:
        """Each failure of the calls inside as a CliError saying what to do; `job` (of `api`),
        `creating` and `pod` name what the calls are about."""
        try:
            yield
        except errors.KubeError as error:
            about = Subject(job, api, creating, pod)
            raise await self._explain(error, about) from error
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

    async def _explain(self, error: errors.KubeError, about: Subject) -> CliError:
        details = error.body.get("details") or {}
        where = "every namespace" if self.target.all_namespaces else f"namespace {self.namespace}"
        if isinstance(error, errors.NotFound):
            return await self._not_found(error, about)
        if isinstance(error, errors.Forbidden) and error.reason == "Forbidden":
            hint = ""
            if details.get("kind") in JOB_PLURALS or about.job is not None or about.creating:
                hint = " (the chart aggregates the rights to its jobs into the edit and view roles)"
            return CliError(
                f"the cluster refused: {error.message}. Ask an administrator for a role that "
                f"allows it in {where}{hint}, or use --context for another identity"
            )
        if isinstance(error, errors.Conflict) and about.creating:
            return CliError(
                f"job {self.namespace}/{about.creating} already exists: choose another --name, "
                f"or delete it first (torchjob delete {about.creating} -n {self.namespace})"
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

    async def _not_found(self, error: errors.NotFound, about: Subject) -> CliError:
        """A job, a pod or the job API itself (its CRD, when the 404 names nothing) not there."""
        details = error.body.get("details") or {}
        api = about.api
        if details.get("kind") == api.plural or (about.job and details.get("name") == about.job):
            return await self._job_not_found(about.job or str(details.get("name")), api)
        if about.pod and details.get("name") == about.pod:
            return CliError(f"pod {self.namespace}/{about.pod} does not exist (any more)")
        if not details:
            return CliError(
                f"the {api.kind} API ({api.api_version}) is not installed in the cluster at "
                f"{self.host}: {_installing(api)}, or check --context"
            )
        return CliError(f"not found: {error.message}")

    async def _job_not_found(self, name: str, api: JobApi) -> CliError:
        """That the job is not there, with the jobs of the namespace it may have meant: of any
        kind, written as the commands take them (a TrainJob's `trainjob/NAME`)."""
        try:
            listing = await self.list_every_kind(all_namespaces=False)
            names = [listed_name(job) for job in listing.jobs]
        except CliError:
            names = []
        wanted = shown(api, name)
        message = f'job "{wanted}" not found in namespace {self.namespace}'
        # The same name of another kind first: a TrainJob named without its kind, say.
        other_kind = [n for n in names if n.rpartition("/")[2] == name and n != wanted]
        close = list(dict.fromkeys([*other_kind, *similar_names(wanted, names)]))[:3]
        if close:
            message += "; did you mean " + " or ".join(close) + "?"
        elif names:
            message += f"; its jobs: {', '.join(sorted(names)[:10])}"
        else:
            message += " (it has no jobs; -A lists every namespace's)"
        return CliError(message)


@dataclass(frozen=True, slots=True)
class Subject:
    """What a call is about, for the message of its failure."""

    job: str | None
    api: JobApi
    creating: str | None
    pod: str | None


@dataclass(slots=True)
class JobListing:
    """The jobs of every API the cluster serves, the APIs listed, and why any API's jobs are
    left out."""

    jobs: list[dict[str, Any]] = field(default_factory=list)
    served: list[JobApi] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)


def _controlled_by(pod: dict[str, Any], api: JobApi) -> bool:
    """The pod's controller is a job of `api` (or it names none, as no replica pod does)."""
    references = (pod.get("metadata") or {}).get("ownerReferences") or []
    owner = next((r for r in references if r.get("controller")), None)
    if owner is None:
        return True
    return bool(owner.get("apiVersion") == api.api_version and owner.get("kind") == api.kind)


def _installing(api: JobApi) -> str:
    """How the operator serves jobs of `api`: installed, with the API's opt-in for an opt-in."""
    opt_in = kind_of(api).opt_in
    if opt_in is None:
        return "install the operator (helm install torchjob charts/torchjob)"
    return (
        f"install the operator with its {opt_in} option (helm upgrade torchjob charts/torchjob "
        f"--set {opt_in}.enabled=true), or the {api.kind} CRD"
    )


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
