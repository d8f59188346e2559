"""One job recipe (render/recipe.py) is what `torchjob submit`'s flags and the console's form both
fill in, and one renderer makes it a manifest of any kind: the same job asked for either way is
the same manifest, and each kind renders every recipe or names the fields it has no place for."""

from __future__ import annotations

import dataclasses

import pytest

from torchjob.api.job_api import JOB_APIS, KUBEFLOW_JOB, TRAIN_JOB, TRAINING_JOB, JobApi
from torchjob.render.job_kinds import kind_of
from torchjob.render.recipe import JobRecipe, NoPlace, TensorBoard, render_job
from torchjob.views.cli.submission import Submission, build_job, recipe_of
from torchjob.views.console.job_form import JobForm, manifest_of, recipe_of_form
from torchjob.views.console.kubeflow_form import kubeflow_manifest_of

# The same job, as flags and as the form: what neither input says differently (the form's
# shared-memory volume is off, its limits are written out as submit derives them).
SUBMITTED = Submission(
    name="train",
    image="pytorch/pytorch:2",
    command=("python", "train.py", "--epochs", "3"),
    workers=3,
    cpu="2",
    memory="4Gi",
    torchrun=True,
    nproc_per_node="2",
    max_restarts=1,
    restart_policy="OnFailure",
    backoff_limit=4,
    deadline=600,
    cleanup_policy="Unfinished",
    queue="team-a",
    queue_priority=2,
)
FORM = JobForm(
    name="train",
    image="pytorch/pytorch:2",
    command_line="python train.py --epochs 3",
    replicas="3",
    cpu_request="2",
    memory_request="4Gi",
    cpu_limit="2",
    memory_limit="4Gi",
    shm=False,
    torchrun=True,
    proc_per_node="2",
    max_restarts="1",
    restart_policy="OnFailure",
    backoff_limit="4",
    active_deadline_seconds="600",
    clean_up_policy="Unfinished",
    queue="team-a",
    priority="2",
)


def test_submit_and_the_form_fill_in_the_same_recipe() -> None:
    # The one difference is the training container's name: `python` for submit, T9k's and
    # Kubeflow's `pytorch` for the form.
    from_form = recipe_of_form(FORM)
    assert (recipe_of(SUBMITTED).container, from_form.container) == ("python", "pytorch")
    assert recipe_of(SUBMITTED) == dataclasses.replace(from_form, container="python")


def test_submit_and_the_form_make_the_same_manifest_of_the_same_job() -> None:
    submitted = build_job(SUBMITTED)
    formed = manifest_of(FORM)
    formed["spec"]["replicaSpecs"][0]["template"]["spec"]["containers"][0]["name"] = "python"
    assert submitted == formed
    # And each is what the one renderer makes of its recipe.
    assert formed == render_job(
        dataclasses.replace(recipe_of_form(FORM), container="python"), kind_of(TRAINING_JOB)
    )


def test_a_change_of_one_input_is_a_change_of_the_manifest() -> None:
    """The comparison above can fail: a flag that differs from the form's field shows."""
    submitted = build_job(dataclasses.replace(SUBMITTED, workers=2))
    formed = manifest_of(FORM)
    formed["spec"]["replicaSpecs"][0]["template"]["spec"]["containers"][0]["name"] = "python"
    assert submitted != formed


def test_the_form_renders_as_either_kind_through_the_one_renderer() -> None:
    recipe = recipe_of_form(dataclasses.replace(FORM, queue="", priority="", max_restarts=""))
    for api in JOB_APIS:
        try:
            assert render_job(recipe, kind_of(api))["kind"] == api.kind
        except NoPlace as refusal:  # a TrainJob keeps these in its runtime
            assert api is TRAIN_JOB
            assert set(refusal.fields) == {"restart_policy", "backoff_limit", "clean_up_policy"}
    assert render_job(recipe, kind_of(KUBEFLOW_JOB)) == kubeflow_manifest_of(
        dataclasses.replace(FORM, queue="", priority="", max_restarts="")
    )


@pytest.mark.parametrize("api", JOB_APIS, ids=lambda api: api.kind)
def test_every_kind_renders_a_recipe_or_names_what_it_has_no_place_for(api: JobApi) -> None:
    everything = recipe_of(
        dataclasses.replace(
            SUBMITTED,
            data=("logs:/logs",),
            tensorboard=True,
            tensorboard_image="tb",
            logdir="/logs/run",
            elastic_min=2,
            elastic_max=4,
            ttl=60,
        )
    )
    assert isinstance(everything.tensorboard, TensorBoard)
    kind = kind_of(api)
    try:
        manifest = render_job(everything, kind)
    except NoPlace as refusal:
        # A refusal names recipe fields, each given in this recipe.
        assert set(refusal.fields) <= {f.name for f in dataclasses.fields(JobRecipe)}
        assert all(getattr(everything, name) is not None for name in refusal.fields)
        assert api is not TRAINING_JOB
    else:
        assert manifest["metadata"] == {"name": "train"}
        assert api is TRAINING_JOB
