"""The job creation page: T9k's form and a YAML view that round-trips with it, checked by the
cluster on every change with a dry-run create made as the user, so the webhook's and the
apiserver's own messages appear beside the field they name; Create makes the job, as the user,
and opens its page.

The page holds one of the two views at a time (`view`): the form, whose fields make the
manifest (views/console/job_form.py), or the YAML, which is the manifest. Switching posts the one
shown and answers the other; a manifest the form cannot show stays in the YAML view, which says
why.

With `--kubeflow` or `--trainer` the form also writes Kubeflow's PyTorchJob or Trainer's TrainJob
(`kind`): the form's recipe is rendered by the kind picked (render/job_kinds.py), whose row in
views/console/kind_forms.py says what the page shows of it; the check, the YAML and Create then
use that kind, and the job opens at its kind's page. No kind is tested here: each is asked of its
table.

`?from=<jobs|pytorchjobs>/<name>` fills the page with an existing job, read as the user, under a
new name (views/console/job_clone.py): Clone opens it in the form, `&as=yaml` (Edit as YAML) in
the YAML view. The PVC field offers the namespace's claims, with their phase, where the user may
list them."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import asdict, dataclass, field
from typing import Any

import yaml
from aiohttp import web

from torchjob.api.job_api import JOB_APIS, TRAINING_JOB, api_named, api_of
from torchjob.api.names import is_dns_1123_subdomain
from torchjob.console import yaml_input
from torchjob.console.jobs import ROUTE_APIS
from torchjob.console.keys import PAGES, SETTINGS, session_of
from torchjob.console.user_api import UserApi
from torchjob.kube.errors import KubeError
from torchjob.kube.resources import CLAIMS, job_resource
from torchjob.render.job_kinds import EVERY_OPT_IN, kind_of, opted_in_settings, served_apis
from torchjob.views.console.job_clone import cloned
from torchjob.views.console.job_form import (
    CLEAN_UP_POLICIES,
    RESTART_POLICIES,
    SWITCHES,
    TEXTS,
    JobForm,
    NoFormPlace,
    NotShown,
    UnreadableField,
    form_from_fields,
    kind_manifest_of,
)
from torchjob.views.console.kind_forms import kind_form

FORM, YAML = "form", "yaml"
ACCEPTED = "the cluster accepts this job"
# The kind a page starts with, and the kind of a YAML written in no other kind served.
TRAINING_KIND = TRAINING_JOB.kind
# Each kind's name on the page, and what it is, said beside the Kind choice while it is chosen.
KIND_LABELS = {api.kind: kind_form(api).label for api in JOB_APIS}
KIND_HELP = {api.kind: kind_form(api).help for api in JOB_APIS}
# The route of each kind's pages (console/jobs.py).
ROUTE_OF = {api: route for route, api in ROUTE_APIS.items()}


def served_kinds(opted_in: Collection[str]) -> tuple[str, ...]:
    """The kinds the console writes: every kind the operator serves (render/job_kinds.py)."""
    return tuple(api.kind for api in served_apis(opted_in))


@dataclass(frozen=True, order=True)
class Claim:
    """A PersistentVolumeClaim the PVC field offers, with its phase (Bound, Pending, Lost)."""

    name: str
    phase: str


@dataclass
class Problems:
    """What the cluster (or the page) said of a job: per form field, and the rest."""

    fields: dict[str, list[str]] = field(default_factory=dict)
    general: list[str] = field(default_factory=list)
    checked: bool = False
    kind: str = TRAINING_KIND

    def add(self, path: str, message: str, view: str) -> None:
        name = kind_form(api_named(self.kind)).field_of_path(path) if view == FORM else None
        if name:
            self.fields.setdefault(name, []).append(message)
        else:
            self.general.append(f"{path}: {message}" if path else message)

    def __bool__(self) -> bool:
        return bool(self.fields or self.general)


@dataclass
class Draft:
    """The job being written: its view, its form (in the form view), its YAML text, and what
    reading it found wrong."""

    view: str
    form: JobForm
    text: str
    manifest: dict[str, Any] | None
    problems: Problems
    yaml_problem: str = ""
    not_shown: str = ""
    kind: str = TRAINING_KIND


def yaml_of(manifest: dict[str, Any]) -> str:
    return yaml.safe_dump(manifest, sort_keys=False, allow_unicode=True, width=100)


def draft_of_form(form: JobForm, kind: str = TRAINING_KIND) -> Draft:
    """The form view's draft of `kind`; fields that make no manifest of it are said to be so
    beside them."""
    problems = Problems(kind=kind)
    try:
        manifest = kind_manifest_of(form, kind_of(api_named(kind)))
    except UnreadableField as error:
        problems.fields.setdefault(error.field, []).append(error.message)
        return Draft(FORM, form, "", None, problems, kind=kind)
    except NoFormPlace as refusal:
        for name, message in refusal.fields.items():
            if name in SWITCHES or name in TEXTS:
                problems.fields.setdefault(name, []).append(message)
            else:  # a field the form does not show (the code a recipe clones): said above it
                problems.general.append(f"{name}: {message}")
        return Draft(FORM, form, "", None, problems, kind=kind)
    return Draft(FORM, form, yaml_of(manifest), manifest, problems, kind=kind)


def draft_of_yaml(text: str, opted_in: Collection[str] = ()) -> Draft:
    """The YAML view's draft, of the kind its apiVersion names (an opt-in kind only where its
    setting is among `opted_in`); a text that is no YAML mapping is said to be so beside it."""
    try:
        manifest = yaml_input.load(text)
    except yaml.YAMLError as error:
        return Draft(YAML, JobForm(), text, None, Problems(), yaml_problem=str(error))
    if not isinstance(manifest, dict):
        problem = "the YAML must be one mapping: " + " or ".join(
            f"a {kind}" for kind in served_kinds(opted_in)
        )
        return Draft(YAML, JobForm(), text, None, Problems(), yaml_problem=problem)
    written = api_of(manifest)
    kind = written.kind if written in served_apis(opted_in) else TRAINING_KIND
    return Draft(YAML, JobForm(), text, manifest, Problems(kind=kind), kind=kind)


async def posted_draft(request: web.Request) -> Draft:
    posted = await request.post()
    fields = {key: value for key, value in posted.items() if isinstance(value, str)}
    opted_in = opted_in_settings(request.app[SETTINGS])
    if fields.get("view") == YAML:
        return draft_of_yaml(fields.get("yaml", ""), opted_in)
    asked = fields.get("kind", "")
    kind = asked if asked in served_kinds(opted_in) else TRAINING_KIND
    return draft_of_form(form_from_fields(fields), kind)


async def check_with_cluster(api: UserApi, namespace: str, draft: Draft, *, dry_run: bool) -> Any:
    """Create the draft's job as the user (only a dry run when `dry_run`): the created job, or
    None with the cluster's refusal put in the draft's problems."""
    if draft.manifest is None:
        return None
    draft.problems.checked = True
    try:
        resource = job_resource(api_named(draft.kind))
        return await api.create(resource, namespace, draft.manifest, dry_run=dry_run)
    except KubeError as error:
        if error.status >= 500 or error.status == 401:
            raise
        refusal_problems(error, draft.problems, draft.view)
        return None


def refusal_problems(error: KubeError, problems: Problems, view: str) -> None:
    """The causes of the cluster's refusal, each beside the field it names: a webhook's
    (through the apiserver) and the apiserver's own carry `details.causes`; others a message."""
    details = error.body.get("details") if isinstance(error.body, dict) else None
    causes = (details or {}).get("causes") if isinstance(details, dict) else None
    named = [c for c in causes or [] if isinstance(c, dict) and c.get("message")]
    for cause in named:
        problems.add(str(cause.get("field") or ""), str(cause["message"]), view)
    if not named:
        path = "metadata.name" if error.reason == "AlreadyExists" else ""
        problems.add(path, error.message or f"{error.status} {error.reason}", view)


def page_context(
    request: web.Request,
    draft: Draft,
    kinds: tuple[str, ...] | None = None,
    claims: list[Claim] | None = None,
) -> dict[str, Any]:
    """The page's context; `kinds` offered in the Kind choice (by default every kind the console
    serves: the apiserver decides whether the user may create it), `claims` in the PVC field
    (None: the user may not list them)."""
    namespace = request.match_info["namespace"]
    if kinds is None:
        kinds = served_kinds(opted_in_settings(request.app[SETTINGS]))
    return {
        "session": session_of(request),
        "namespace": namespace,
        "route_kind": "jobs",
        "base": f"/ns/{namespace}/jobs/new",
        "draft": draft,
        "form": asdict(draft.form),
        "errors": draft.problems.fields,
        "restart_policies": RESTART_POLICIES,
        "clean_up_policies": CLEAN_UP_POLICIES,
        "accepted": ACCEPTED,
        # The choice is shown only where there is one to make.
        "kinds": {kind: KIND_LABELS[kind] for kind in kinds} if len(kinds) > 1 else {},
        "kind_help": KIND_HELP,
        "claims": claims,
    }


def render(
    request: web.Request,
    template: str,
    draft: Draft,
    status: int = 200,
    *,
    oob: bool = False,
    kinds: tuple[str, ...] | None = None,
    claims: list[Claim] | None = None,
) -> web.Response:
    """A page or fragment of the draft; with `oob`, each field's messages for htmx to swap in
    beside the field (out of band), wherever the fragment itself goes."""
    context = page_context(request, draft, kinds, claims)
    return request.app[PAGES].response(template, status=status, oob=oob, **context)


async def creatable_kinds(request: web.Request, namespace: str) -> tuple[str, ...]:
    """The kinds the console serves that the user may create in `namespace`."""
    served = served_kinds(opted_in_settings(request.app[SETTINGS]))
    checks = {kind: ("create", job_resource(api_named(kind)), "") for kind in served}
    allowed = await UserApi(session_of(request).client).allowed(namespace, checks)
    return tuple(kind for kind in served if allowed[kind])


async def claims_in(request: web.Request, namespace: str) -> list[Claim] | None:
    """The namespace's PersistentVolumeClaims, read as the user; None where they may not."""
    try:
        listed = await UserApi(session_of(request).client).list_objects(CLAIMS, namespace)
    except KubeError as error:
        if error.status == 403:
            return None
        raise
    items = [item for item in listed.get("items") or [] if isinstance(item, dict)]
    return sorted(
        Claim(str(item["metadata"]["name"]), str((item.get("status") or {}).get("phase") or "?"))
        for item in items
    )


def clone_source(source: str, opted_in: Collection[str]) -> tuple[str, str] | None:
    """The kind and name of the job `?from=<route>/<name>` names, of a kind the console serves
    (an opt-in kind's only where its setting is among `opted_in`); None where it names none."""
    route, _, name = source.partition("/")
    api = ROUTE_APIS.get(route)
    if api is None or api not in served_apis(opted_in) or not is_dns_1123_subdomain(name):
        return None
    return api.kind, name


def draft_of_job(job: dict[str, Any], kind: str, view: str) -> Draft:
    """The draft of a new job like `job`, in `view`: the form where it can show the clone (else
    the YAML, saying why)."""
    form = kind_form(api_named(kind))
    for keep in (form.kept_in_clones, frozenset()):
        manifest = cloned(job, form.defaulting, keep)
        shown = form.form_of(manifest)
        if not isinstance(shown, NotShown):
            break
    if view == FORM and not isinstance(shown, NotShown):
        return draft_of_form(shown, kind)
    # The job's kind is one the console serves (`clone_source`), so its YAML is read as it.
    draft = draft_of_yaml(yaml_of(manifest), EVERY_OPT_IN)
    if view == FORM:
        draft.not_shown = str(shown)
    return draft


async def starting_draft(request: web.Request, namespace: str, kinds: tuple[str, ...]) -> Draft:
    """The page's first draft: the job `?from=` names, cloned, or the empty form of the kind
    `?kind=` names (where the user may create it)."""
    if "from" not in request.query and "as" not in request.query:
        asked = request.query.get("kind", "")
        return draft_of_form(JobForm(), asked if asked in kinds else kinds[0])
    source = clone_source(request.query.get("from", ""), opted_in_settings(request.app[SETTINGS]))
    view = request.query.get("as", FORM)
    if source is None or view not in (FORM, YAML):
        raise web.HTTPBadRequest(
            text="from names a job as jobs/<name> or pytorchjobs/<name>; as is form or yaml"
        )
    kind, name = source
    resource = job_resource(api_named(kind))
    job = await UserApi(session_of(request).client).get(resource, namespace, name)
    return draft_of_job(job, kind, view)


def error_page(request: web.Request, status: int, reason: str, message: str) -> web.Response:
    return request.app[PAGES].response(
        "error.html",
        status=status,
        status_code=status,
        reason=reason,
        message=message,
        session=session_of(request),
    )


async def create_page(request: web.Request) -> web.Response:
    """The form, to a user the apiserver would let create jobs here: empty, or filled with the
    job `?from=` names."""
    namespace = request.match_info["namespace"]
    kinds = await creatable_kinds(request, namespace)
    if not kinds:
        message = f"Your account may not create training jobs in the namespace {namespace}."
        return error_page(request, 403, "Forbidden", message)
    try:
        draft = await starting_draft(request, namespace, kinds)
    except web.HTTPBadRequest as bad:
        return error_page(request, 400, "Bad Request", bad.text or "")
    claims = await claims_in(request, namespace)
    return render(request, "create.html", draft, kinds=kinds, claims=claims)


async def to_yaml(request: web.Request) -> web.Response:
    """The YAML view of the posted form (the form again, with its problem, if it makes none)."""
    draft = await posted_draft(request)
    if draft.view == FORM and draft.manifest is not None:
        draft = draft_of_yaml(draft.text, opted_in_settings(request.app[SETTINGS]))
    return render(request, "fragments/create_editor.html", draft)


async def to_form(request: web.Request) -> web.Response:
    """The form view of the posted YAML, or the YAML still, saying why the form cannot show it."""
    draft = await posted_draft(request)
    if draft.view == YAML and draft.manifest is not None:
        shown = kind_form(api_named(draft.kind)).form_of(draft.manifest)
        if isinstance(shown, NotShown):
            draft.not_shown = str(shown)
        else:
            draft = draft_of_form(shown, draft.kind)
    claims = await claims_in(request, request.match_info["namespace"])
    return render(request, "fragments/create_editor.html", draft, claims=claims)


async def check(request: web.Request) -> web.Response:
    """The cluster's verdict on the posted draft (a dry-run create as the user), as a summary
    and each field's messages swapped in beside it."""
    draft = await posted_draft(request)
    api = UserApi(session_of(request).client)
    await check_with_cluster(api, request.match_info["namespace"], draft, dry_run=True)
    return render(request, "fragments/create_check.html", draft, oob=True)


async def create(request: web.Request) -> web.StreamResponse:
    """Create the job as the user and open its page; refused, the page again (422) with the
    cluster's messages beside their fields, and nothing created."""
    draft = await posted_draft(request)
    namespace = request.match_info["namespace"]
    api = UserApi(session_of(request).client)
    created = await check_with_cluster(api, namespace, draft, dry_run=False)
    if created is None:
        claims = await claims_in(request, namespace)
        return render(request, "create.html", draft, status=422, claims=claims)
    name = created["metadata"]["name"]
    raise web.HTTPSeeOther(f"/ns/{namespace}/{ROUTE_OF[api_named(draft.kind)]}/{name}")
