"""The creation page's parts that need no cluster: the cluster's refusals placed beside the fields
they name, the YAML view's reading, and the form's markup (every input labelled and described by
its messages)."""

from __future__ import annotations

import dataclasses
import re

from torchjob.console.create import (
    FORM,
    KIND_LABELS,
    KUBEFLOW_KIND,
    TRAINING_KIND,
    YAML,
    Draft,
    Problems,
    draft_of_form,
    draft_of_yaml,
    refusal_problems,
)
from torchjob.console.templating import Pages
from torchjob.kube.errors import Conflict, Forbidden, Invalid
from torchjob.render.job_form import JobForm

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
    draft = draft_of_form(JobForm(args="train.py 'unclosed"))
    assert draft.manifest is None and list(draft.problems.fields) == ["args"]


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
    assert draft_of_yaml(text, kubeflow=True).kind == KUBEFLOW_KIND
    assert draft_of_yaml(text, kubeflow=False).kind == TRAINING_KIND


def test_the_kind_choice_is_shown_only_where_there_is_one_to_make() -> None:
    draft = draft_of_form(JobForm(), KUBEFLOW_KIND)
    html = render("fragments/create_editor.html", draft, kinds=KIND_LABELS)
    assert '<label for="f-kind">Kind</label>' in html
    assert '<option value="PyTorchJob" selected>Kubeflow PyTorchJob</option>' in html
    alone = render("fragments/create_editor.html", draft, kinds={})
    assert 'id="f-kind"' not in alone
    assert '<input type="hidden" name="kind" value="PyTorchJob">' in alone
