"""A new job from an existing one: the same spec once defaulted, under a new name, without what
the cluster keeps of the original."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from support.forms import FORMS

from torchjob.api.defaults import default_job
from torchjob.views.console.job_clone import clone_name, cloned
from torchjob.views.console.job_form import JobForm, form_of, manifest_of


@pytest.mark.parametrize(
    ("name", "clone"), [("train", "train-2"), ("train-2", "train-3"), ("a-b-9", "a-b-10")]
)
def test_a_clone_is_named_after_its_job(name: str, clone: str) -> None:
    assert clone_name(name) == clone


@given(FORMS)
def test_a_clone_is_the_job_the_webhook_makes_of_it_and_the_form_the_job_had(
    form: JobForm,
) -> None:
    job, _ = default_job({**manifest_of(form), "status": {"phase": "Running"}})
    job["metadata"] = {"name": "job", "uid": "u", "resourceVersion": "1", "labels": {"a": "b"}}
    clone = cloned(job, default_job)
    assert set(clone) == {"apiVersion", "kind", "metadata", "spec"}
    assert clone["metadata"] == {"name": "job-2"}
    assert default_job(clone)[0]["spec"] == job["spec"]
    shown = form_of(clone)
    assert isinstance(shown, JobForm)
    # The form writes no empty mapping (a torchrunConfig left with only its defaults).
    assert manifest_of(shown)["spec"] == without_empty(clone["spec"])


def without_empty(value: Any) -> Any:
    if isinstance(value, dict):
        kept = {key: without_empty(child) for key, child in value.items()}
        return {key: child for key, child in kept.items() if child not in ({}, [], None)}
    if isinstance(value, list):
        return [without_empty(child) for child in value]
    return value


def test_a_value_written_as_its_default_is_left_to_the_webhook() -> None:
    job, _ = default_job(manifest_of(JobForm(name="j", image="i", backoff_limit="3")))
    assert "runPolicy" not in cloned(job, default_job)["spec"]
