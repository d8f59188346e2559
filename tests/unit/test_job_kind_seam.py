"""What differs between the APIs a job may be written in is asked of its kind
(render/job_kinds.py): whether it is paused and how to pause it, its phase, outcome and
autoscaler, its own status and labels. Outside the kinds' own modules no code tests which kind a
job is: a comparison with a job API, a kind's name, plural or apiVersion fails here, except in
the few modules of `ALLOWED`, each with why."""

from __future__ import annotations

import ast
import copy
from pathlib import Path
from typing import Any

import pytest
from support.trainer import TRAIN_JOB as TRAIN_JOB_MANIFEST
from support.trainer import started
from support.webhook import KUBEFLOW_JOB as kubeflow_job_manifest

from torchjob.api.job_api import JOB_APIS, KUBEFLOW_JOB, TRAIN_JOB, TRAINING_JOB, JobApi
from torchjob.api.jsoncopy import merge_patched
from torchjob.api.kubeflow_admission import default_pytorchjob
from torchjob.api.trainer_admission import default_trainjob
from torchjob.render.job_kinds import EVERY_OPT_IN, KINDS, kind_of, served_apis, written_api
from torchjob.render.replica_objects import owner_reference

TRAINING_KIND = kind_of(TRAINING_JOB)

PACKAGE = Path(__file__).parents[2] / "services" / "torchjob"
# A kind's own modules: its API (and the generated model), its admission, its status and labels,
# its form, and the seam itself.
KIND_HOMES = {
    "render/job_kinds.py",
    "api/job_api.py",
    "api/types.py",
    "api/kubeflow.py",
    "api/kubeflow_types.py",
    "api/kubeflow_admission.py",
    "render/kubeflow.py",
    "views/console/kubeflow_form.py",
    "api/trainer.py",
    "api/trainer_types.py",
    "api/trainer_admission.py",
    "render/trainer.py",
}
# Modules that still compare with a kind, and why that is no test of a job's kind.
ALLOWED = {
    # A key's text leaves out the default kind, so `namespace/name` keys still parse.
    "kube/reconcile.py": "a job key's text",
}
# The names that stand for a job API or its kind in the code.
KIND_NAMES = {"TRAINING_JOB", "KUBEFLOW_JOB", "TRAIN_JOB", "TRAINING_KIND", "KUBEFLOW_KIND"}
# A generated model's constants (`types.KIND`, `kubeflow_types.API_VERSION`).
MODEL_MODULES = {"types", "kubeflow_types", "trainer_types"}
MODEL_CONSTANTS = {"KIND", "API_VERSION", "PLURAL"}
# How a job's kind is spelled in the objects: its kind, plural and apiVersion.
KIND_WORDS = {word for api in JOB_APIS for word in (api.kind, api.plural, api.api_version)}


def names_a_kind(node: ast.AST) -> bool:
    for part in ast.walk(node):
        if isinstance(part, ast.Name) and part.id in KIND_NAMES:
            return True
        if isinstance(part, ast.Attribute) and (
            part.attr in KIND_NAMES
            or (
                part.attr in MODEL_CONSTANTS
                and isinstance(part.value, ast.Name)
                and part.value.id in MODEL_MODULES
            )
        ):
            return True
        if isinstance(part, ast.Constant) and part.value in KIND_WORDS:
            return True
    return False


def kind_tests_in(source: str) -> list[int]:
    """The lines of `source` that compare something with a job API or a kind's name."""
    return sorted(
        node.lineno
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Compare)
        and any(names_a_kind(side) for side in (node.left, *node.comparators))
    )


def kind_tests_by_module() -> dict[str, list[int]]:
    found: dict[str, list[int]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        if relative not in KIND_HOMES and (lines := kind_tests_in(path.read_text())):
            found[relative] = lines
    return found


def test_the_finder_finds_a_kind_tested() -> None:
    source = (
        "a = api is KUBEFLOW_JOB\n"
        'b = job.get("kind") == "PyTorchJob"\n'
        'c = route == "pytorchjobs"\n'
        "d = kind == kubeflow_types.KIND\n"
        "e = key.api == resources.TRAINING_JOB\n"
        "f = kind_of(api).paused(job)\n"
        'g = job.get("kind") == "Pod"\n'
    )
    assert kind_tests_in(source) == [1, 2, 3, 4, 5]


def test_no_module_outside_the_kinds_tests_which_kind_a_job_is() -> None:
    found = kind_tests_by_module()
    assert set(found) - set(ALLOWED) == set(), {m: found[m] for m in set(found) - set(ALLOWED)}


def test_each_allowance_is_still_needed() -> None:
    """An allowance goes once its module no longer compares with a kind."""
    assert set(ALLOWED) <= set(kind_tests_by_module())


def test_every_api_has_a_kind_and_torchjobs_own_needs_no_opt_in() -> None:
    assert set(KINDS) == set(JOB_APIS)
    assert all(kind.api is api for api, kind in KINDS.items())
    assert served_apis(()) == (TRAINING_JOB,)
    assert served_apis({"kubeflow"}) == (TRAINING_JOB, KUBEFLOW_JOB)
    assert served_apis({"trainer"}) == (TRAINING_JOB, TRAIN_JOB)
    assert served_apis(EVERY_OPT_IN) == (TRAINING_JOB, KUBEFLOW_JOB, TRAIN_JOB)


def stored_job(api: JobApi) -> dict[str, Any]:
    """A defaulted job of `api`, as the apiserver stores it."""
    if api is KUBEFLOW_JOB:
        job, _ = default_pytorchjob(copy.deepcopy(kubeflow_job_manifest))
        job["metadata"]["uid"] = "u"
        return job
    if api is TRAIN_JOB:
        job, _ = default_trainjob(started(TRAIN_JOB_MANIFEST))
        return job
    meta = {"name": "j", "uid": "u"}
    return {"apiVersion": api.api_version, "kind": api.kind, "metadata": meta, "spec": {}}


@pytest.mark.parametrize("api", JOB_APIS, ids=lambda api: api.kind)
def test_a_kind_reads_the_pause_its_patch_writes(api: JobApi) -> None:
    kind = kind_of(api)
    job = stored_job(api)
    assert not kind.paused(job)
    for paused in (True, False):
        job = merge_patched(job, kind.pause_patch(paused))
        assert kind.paused(job) is paused
        assert TRAINING_KIND.paused(kind.run(job) or {}) is paused
        assert TRAINING_KIND.paused(kind.training_job(job)) is paused


@pytest.mark.parametrize("api", JOB_APIS, ids=lambda api: api.kind)
def test_a_kind_says_its_phase_and_outcome_in_its_own_words(api: JobApi) -> None:
    kind = kind_of(api)
    job = stored_job(api)
    assert kind.phase(job) in kind.phases
    assert kind.outcome(job) is None
    record = {"phase": "Failed", "conditions": [{"type": "Failed", "status": "True"}]}
    shown = kind.shown_status(kind.training_job(job), record, "2026-01-01T00:00:00Z")
    ended = {**job, "status": merge_patched(job.get("status") or {}, shown)}
    assert kind.outcome(ended) == "Failed"
    assert kind.phase(ended) == "Failed"


def test_only_a_kind_that_is_autoscaled_renders_an_autoscaler() -> None:
    for api, kind in KINDS.items():
        job = kind.training_job(stored_job(api))
        owner = owner_reference(job["metadata"], api)
        if not kind.autoscaled:
            assert kind.autoscaler(job, owner) is None


@pytest.mark.parametrize("api", JOB_APIS, ids=lambda api: api.kind)
def test_a_kind_admits_a_manifest_of_its_api_as_its_webhooks_do(api: JobApi) -> None:
    kind = kind_of(api)
    manifest = copy.deepcopy(kubeflow_job_manifest) if api is KUBEFLOW_JOB else None
    if api is TRAIN_JOB:
        manifest = started(TRAIN_JOB_MANIFEST)
    if manifest is None:
        replica = {"type": "worker", "replicas": 1}
        pod = {"containers": [{"name": "python", "image": "i", "command": ["python", "t.py"]}]}
        spec = {"replicaSpecs": [{**replica, "template": {"spec": pod}}]}
        manifest = {"apiVersion": api.api_version, "kind": api.kind, "spec": spec}
    manifest["metadata"] = {"name": "j", "namespace": "ns"}
    assert written_api(manifest) is api
    defaulted = kind.default(manifest)
    assert kind.validate(defaulted).allowed and kind.default(defaulted) == defaulted
    assert not kind.validate({**defaulted, "spec": {}}).allowed


def test_the_api_a_manifest_is_written_in_is_the_one_it_names() -> None:
    assert written_api({"kind": "Pod"}) is TRAINING_JOB
    assert written_api({"apiVersion": KUBEFLOW_JOB.api_version}) is KUBEFLOW_JOB
    # Named by both, an opt-in API's rules judge it, naming the field that is not its own.
    assert written_api({"apiVersion": TRAINING_JOB.api_version, "kind": KUBEFLOW_JOB.kind}) is (
        KUBEFLOW_JOB
    )
