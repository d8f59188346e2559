"""The job creation page: T9k's form and a YAML view that round-trips with it, checked by the
cluster on every change with a dry-run create made as the user, so the webhook's and the
apiserver's own messages appear beside the field they name; Create makes the job, as the user,
and opens its page.

The page holds one of the two views at a time (`view`): the form, whose fields make the manifest
(render/job_form.py), or the YAML, which is the manifest. Switching posts the one shown and answers
the other; a manifest the form cannot show stays in the YAML view, which says why."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import yaml
from aiohttp import web

from torchjob.console.keys import PAGES, session_of
from torchjob.console.user_api import UserApi
from torchjob.kube.errors import KubeError
from torchjob.kube.resources import JOBS
from torchjob.render.job_form import (
    CLEAN_UP_POLICIES,
    RESTART_POLICIES,
    JobForm,
    NotShown,
    UnreadableField,
    field_of_path,
    form_from_fields,
    form_of,
    manifest_of,
)

FORM, YAML = "form", "yaml"
ACCEPTED = "the cluster accepts this job"


@dataclass
class Problems:
    """What the cluster (or the page) said of a job: per form field, and the rest."""

    fields: dict[str, list[str]] = field(default_factory=dict)
    general: list[str] = field(default_factory=list)
    checked: bool = False

    def add(self, path: str, message: str, view: str) -> None:
        name = field_of_path(path) if view == FORM else None
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


def yaml_of(manifest: dict[str, Any]) -> str:
    return yaml.safe_dump(manifest, sort_keys=False, allow_unicode=True, width=100)


def draft_of_form(form: JobForm) -> Draft:
    problems = Problems()
    try:
        manifest = manifest_of(form)
    except UnreadableField as error:
        problems.fields.setdefault(error.field, []).append(error.message)
        return Draft(FORM, form, "", None, problems)
    return Draft(FORM, form, yaml_of(manifest), manifest, problems)


def draft_of_yaml(text: str) -> Draft:
    """The YAML view's draft; a text that is no YAML mapping is said to be so beside it."""
    try:
        manifest = yaml.safe_load(text)
    except yaml.YAMLError as error:
        return Draft(YAML, JobForm(), text, None, Problems(), yaml_problem=str(error))
    if not isinstance(manifest, dict):
        problem = "the YAML must be one mapping: a PyTorchTrainingJob"
        return Draft(YAML, JobForm(), text, None, Problems(), yaml_problem=problem)
    return Draft(YAML, JobForm(), text, manifest, Problems())


async def posted_draft(request: web.Request) -> Draft:
    posted = await request.post()
    fields = {key: value for key, value in posted.items() if isinstance(value, str)}
    if fields.get("view") == YAML:
        return draft_of_yaml(fields.get("yaml", ""))
    return draft_of_form(form_from_fields(fields))


async def check_with_cluster(api: UserApi, namespace: str, draft: Draft, *, dry_run: bool) -> Any:
    """Create the draft's job as the user (only a dry run when `dry_run`): the created job, or
    None with the cluster's refusal put in the draft's problems."""
    if draft.manifest is None:
        return None
    draft.problems.checked = True
    try:
        return await api.create(JOBS, namespace, draft.manifest, dry_run=dry_run)
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


def page_context(request: web.Request, draft: Draft) -> dict[str, Any]:
    namespace = request.match_info["namespace"]
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
    }


def render(
    request: web.Request, template: str, draft: Draft, status: int = 200, *, oob: bool = False
) -> web.Response:
    """A page or fragment of the draft; with `oob`, each field's messages for htmx to swap in
    beside the field (out of band), wherever the fragment itself goes."""
    context = page_context(request, draft)
    return request.app[PAGES].response(template, status=status, oob=oob, **context)


async def create_page(request: web.Request) -> web.Response:
    """The empty form, to a user the apiserver would let create jobs here."""
    namespace = request.match_info["namespace"]
    if not await UserApi(session_of(request).client).may("create", JOBS, namespace):
        return request.app[PAGES].response(
            "error.html",
            status=403,
            status_code=403,
            reason="Forbidden",
            message=f"Your account may not create training jobs in the namespace {namespace}.",
            session=session_of(request),
        )
    return render(request, "create.html", draft_of_form(JobForm()))


async def to_yaml(request: web.Request) -> web.Response:
    """The YAML view of the posted form (the form again, with its problem, if it makes none)."""
    draft = await posted_draft(request)
    if draft.view == FORM and draft.manifest is not None:
        draft = draft_of_yaml(draft.text)
    return render(request, "fragments/create_editor.html", draft)


async def to_form(request: web.Request) -> web.Response:
    """The form view of the posted YAML, or the YAML still, saying why the form cannot show it."""
    draft = await posted_draft(request)
    if draft.view == YAML and draft.manifest is not None:
        shown = form_of(draft.manifest)
        if isinstance(shown, NotShown):
            draft.not_shown = str(shown)
        else:
            draft = draft_of_form(shown)
    return render(request, "fragments/create_editor.html", draft)


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
        return render(request, "create.html", draft, status=422)
    name = created["metadata"]["name"]
    raise web.HTTPSeeOther(f"/ns/{namespace}/jobs/{name}")
