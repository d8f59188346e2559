"""The creation page's parts that need no cluster: the cluster's refusals placed beside the fields
they name, the YAML view's reading, and the form's markup (every input labelled and described by
its messages)."""

from __future__ import annotations

import dataclasses
import re

from markupsafe import escape

from torchjob.api.defaults import default_job
from torchjob.api.job_api import KUBEFLOW_JOB, JobApi
from torchjob.api.kubeflow_admission import default_pytorchjob
from torchjob.console.create import (
    FORM,
    KIND_HELP,
    KIND_LABELS,
    TRAINING_KIND,
    YAML,
    Claim,
    Draft,
    Problems,
    clone_source,
    draft_of_form,
    draft_of_job,
    draft_of_yaml,
    refusal_problems,
)
from torchjob.console.jobs import create_query, kind_tabs
from torchjob.console.templating import Pages
from torchjob.kube.errors import Conflict, Forbidden, Invalid
from torchjob.views.console.job_form import JobForm, NotShown, manifest_of
from torchjob.views.console.kind_forms import kind_form
from torchjob.views.console.kubeflow_form import kubeflow_manifest_of

KUBEFLOW_KIND = KUBEFLOW_JOB.kind
WEBHOOK_REFUSAL = Invalid(
    422,
    "Invalid",
    'admission webhook "validate.torchjob" denied the request: PyTorchTrainingJob t/x is invalid',
    {
        "details": {
            "causes": [
                {
                    "field": "spec.replicaSpecs[0].template.spec.containers[0].resources.limits",
                    "message": 'procPerNode "gpu" needs a GPU limit (nvidia.com/gpu)',
                },
                {"field": "spec.elastic.minReplicas", "message": "exceeds maxReplicas"},
            ]
        }
    },
)


def test_a_refusals_causes_go_beside_their_fields_and_the_rest_above() -> None:
    problems = Problems()
    refusal_problems(WEBHOOK_REFUSAL, problems, FORM)
    assert problems.fields == {"gpus": ['procPerNode "gpu" needs a GPU limit (nvidia.com/gpu)']}
    assert problems.general == ["spec.elastic.minReplicas: exceeds maxReplicas"]


def test_in_the_yaml_view_every_cause_is_listed_with_its_path() -> None:
    problems = Problems()
    refusal_problems(WEBHOOK_REFUSAL, problems, YAML)
    assert not problems.fields
    assert problems.general[0].startswith("spec.replicaSpecs[0].template.spec.containers[0]")


def test_a_refusal_without_causes_is_its_message_and_a_taken_name_is_the_names() -> None:
    problems = Problems()
    refusal_problems(Forbidden(403, "Forbidden", "cannot create here"), problems, FORM)
    refusal_problems(Conflict(409, "AlreadyExists", '"x" already exists'), problems, FORM)
    assert problems.general == ["cannot create here"]
    assert problems.fields == {"name": ['"x" already exists']}


def test_yaml_that_is_not_one_mapping_is_said_to_be_so() -> None:
    assert "mapping" in draft_of_yaml("- a\n- b\n").yaml_problem
    assert draft_of_yaml("spec: [unclosed").yaml_problem
    assert draft_of_yaml("kind: PyTorchTrainingJob\n").manifest == {"kind": "PyTorchTrainingJob"}


def test_a_line_that_cannot_be_split_is_refused_beside_it_before_the_cluster_is_asked() -> None:
    draft = draft_of_form(JobForm(command_line="train.py 'unclosed"))
    assert draft.manifest is None and list(draft.problems.fields) == ["command_line"]


def render(template: str, draft: Draft, **extra: object) -> str:
    return Pages().text(
        template,
        draft=draft,
        form=dataclasses.asdict(draft.form),
        errors=draft.problems.fields,
        base="/ns/t/jobs/new",
        restart_policies=("Never",),
        clean_up_policies=("None",),
        accepted="the cluster accepts this job",
        **extra,
    )


def test_every_input_has_a_label_and_is_described_by_its_messages() -> None:
    draft = draft_of_form(JobForm(name="Bad_Name"))
    draft.problems.fields["name"] = ["a lowercase RFC 1123 subdomain"]
    html = render("fragments/create_editor.html", draft)
    inputs = re.findall(r'<(?:input|select|textarea) id="f-([a-z_]+)"[^>]*>', html)
    assert set(inputs) == {f.name for f in dataclasses.fields(JobForm)}
    for name in inputs:
        assert f'<label for="f-{name}">' in html
        tag = re.search(rf'<(?:input|select) id="f-{name}"[^>]*>', html)
        assert tag and f"error-{name}" in tag.group(0)
    assert 'aria-invalid="true"' in html and "RFC 1123" in html


def test_the_checks_answer_carries_each_fields_messages_out_of_band() -> None:
    draft = draft_of_form(JobForm())
    draft.problems.checked = True
    draft.problems.fields["gpus"] = ["needs a GPU limit"]
    html = render("fragments/create_check.html", draft, oob=True)
    assert "The cluster refuses this job" in html
    assert re.search(r'id="error-gpus"[^>]*hx-swap-oob="true">needs a GPU limit<', html)
    assert html.count('hx-swap-oob="true"') == len(dataclasses.fields(JobForm))


def test_the_kubeflow_kind_makes_a_pytorchjob_and_refuses_what_it_has_no_place_for() -> None:
    draft = draft_of_form(JobForm(name="j", image="i", replicas="2"), KUBEFLOW_KIND)
    assert draft.manifest is not None and draft.manifest["kind"] == "PyTorchJob"
    assert "pytorchReplicaSpecs:" in draft.text
    refused = draft_of_form(JobForm(name="j", tensorboard=True, queue="q"), KUBEFLOW_KIND)
    assert refused.manifest is None and set(refused.problems.fields) == {"tensorboard", "queue"}


MASTER_CONTAINER = "spec.pytorchReplicaSpecs.Master.template.spec.containers[0]"


def test_a_pytorchjobs_refusal_goes_beside_the_field_its_path_names() -> None:
    refusal = Invalid(
        422,
        "Invalid",
        "PyTorchJob is invalid",
        {
            "details": {
                "causes": [
                    {"field": f"{MASTER_CONTAINER}.image", "message": "is required"},
                ]
            }
        },
    )
    problems = Problems(kind=KUBEFLOW_KIND)
    refusal_problems(refusal, problems, FORM)
    assert problems.fields == {"image": ["is required"]}


def test_the_yaml_views_kind_is_its_api_version_where_kubeflow_is_served() -> None:
    text = "apiVersion: kubeflow.org/v1\nkind: PyTorchJob\n"
    assert draft_of_yaml(text, {"kubeflow"}).kind == KUBEFLOW_KIND
    assert draft_of_yaml(text, ()).kind == TRAINING_KIND


def test_the_kind_choice_is_shown_only_where_there_is_one_to_make() -> None:
    draft = draft_of_form(JobForm(), KUBEFLOW_KIND)
    html = render("fragments/create_editor.html", draft, kinds=KIND_LABELS, kind_help=KIND_HELP)
    assert '<label for="f-kind">Kind</label>' in html
    assert re.search(
        r'<option value="PyTorchJob" data-help="[^"]*" selected>Kubeflow PyTorchJob<', html
    )
    # The help said is the chosen kind's, and each option carries its own for the page's script.
    assert f'aria-live="polite">{escape(KIND_HELP[KUBEFLOW_KIND])}</p>' in html
    training = render(
        "fragments/create_editor.html",
        draft_of_form(JobForm()),
        kinds=KIND_LABELS,
        kind_help=KIND_HELP,
    )
    assert f'aria-live="polite">{escape(KIND_HELP[TRAINING_KIND])}</p>' in training
    alone = render("fragments/create_editor.html", draft, kinds={})
    assert 'id="f-kind"' not in alone
    assert '<input type="hidden" name="kind" value="PyTorchJob">' in alone


def stored(manifest: dict[str, object], default: object = default_job) -> dict[str, object]:
    """`manifest` as the cluster keeps it: defaulted, with its metadata and status."""
    job, _ = default_job(manifest) if default is default_job else default_pytorchjob(manifest)
    job["metadata"] = {"name": "train", "uid": "u-1", "resourceVersion": "7", "generation": 2}
    job["status"] = {"phase": "ImagePullFailed"}
    return job


def test_a_clone_is_the_form_of_the_job_under_a_new_name_without_its_defaults() -> None:
    form = JobForm(name="train", image="pytorh/pytorch:2", command_line="python train.py -e 3")
    draft = draft_of_job(stored(manifest_of(form)), TRAINING_KIND, FORM)
    assert draft.view == FORM and not draft.problems
    assert draft.form == dataclasses.replace(form, name="train-2")
    assert draft.manifest is not None and "status" not in draft.manifest


def test_a_pytorchjob_with_workers_is_cloned_into_the_form_with_its_replicas() -> None:
    form = JobForm(name="train", image="i", replicas="3", command_line="python train.py")
    job = stored(kubeflow_manifest_of(form), default_pytorchjob)
    draft = draft_of_job(job, KUBEFLOW_KIND, FORM)
    assert draft.kind == KUBEFLOW_KIND and draft.form == dataclasses.replace(form, name="train-2")


def test_edit_as_yaml_opens_the_clone_in_the_yaml_view() -> None:
    form = JobForm(name="train", image="i", command_line="python train.py")
    draft = draft_of_job(stored(manifest_of(form)), TRAINING_KIND, YAML)
    assert draft.view == YAML and "name: train-2" in draft.text
    assert "uid" not in draft.text and "status" not in draft.text and "OnFailure" not in draft.text


def test_a_job_the_form_cannot_show_is_cloned_into_the_yaml_view_saying_why() -> None:
    manifest = manifest_of(JobForm(name="train", image="i"))
    manifest["spec"]["replicaSpecs"][0]["template"]["spec"]["containers"].append(
        {"name": "proxy", "image": "envoy"}
    )
    draft = draft_of_job(stored(manifest), TRAINING_KIND, FORM)
    assert draft.view == YAML and "one container" in draft.not_shown and "envoy" in draft.text


def test_from_names_a_served_kind_and_a_dns_label() -> None:
    assert clone_source("jobs/train-1", ()) == (TRAINING_KIND, "train-1")
    assert clone_source("pytorchjobs/train", {"kubeflow"}) == (KUBEFLOW_KIND, "train")
    for refused in (
        "pytorchjobs/train",
        "jobs/../secrets/x",
        "jobs/Train",
        "jobs/a%2Fb",
        "jobs/",
        "train",
        "configmaps/train",
        "jobs/train/extra",
    ):
        assert clone_source(refused, ()) is None, refused


def test_the_claim_field_offers_the_namespaces_claims_with_their_phase() -> None:
    draft = draft_of_form(JobForm())
    claims = [Claim("data", "Bound"), Claim("scratch", "Pending")]
    html = render("fragments/create_editor.html", draft, claims=claims)
    assert 'list="claims"' in html
    assert '<option value="data" label="data · Bound">Bound</option>' in html
    assert "pick one of the 2 listed" in html
    unlisted = render("fragments/create_editor.html", draft, claims=None)
    assert "may not list the namespace" in unlisted and 'label="data' not in unlisted


def test_the_jobs_page_offers_each_served_kind_from_the_kinds_table() -> None:
    assert kind_tabs(()) == {"jobs": "PyTorchTrainingJobs"}
    assert kind_tabs({"kubeflow"}) == {
        "jobs": "PyTorchTrainingJobs",
        "pytorchjobs": "Kubeflow PyTorchJobs",
    }
    assert (create_query("jobs"), create_query("pytorchjobs")) == ("", "?kind=PyTorchJob")
    assert KIND_LABELS == {
        "PyTorchTrainingJob": "PyTorchTrainingJob",
        "PyTorchJob": "Kubeflow PyTorchJob",
        "TrainJob": "Kubeflow TrainJob",
    }


def test_a_kind_without_a_row_of_its_own_is_offered_by_its_name_and_cloned_as_yaml() -> None:
    unknown = JobApi("example.dev", "v1", "TrainJob", "trainjobs")
    shown = kind_form(unknown)
    assert shown.label == "TrainJob" and shown.field_of_path("spec.x") is None
    assert isinstance(shown.form_of({"kind": "TrainJob"}), NotShown)
    assert shown.defaulting({"spec": {}}) == ({"spec": {}}, None)
