"""Defaulting fills only what is absent; validation reports every rule with its field path."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from support.jobs import JobBuilder

from torchjob.api.defaults import default_job, pointer
from torchjob.api.validation import validate

DATA = Path(__file__).parents[1] / "data" / "t9k"


def load(stem: str) -> dict[str, Any]:
    data = yaml.safe_load((DATA / f"{stem}.yaml").read_text())
    assert isinstance(data, dict)
    return data


def job(*replicas: dict[str, Any], name: str = "j", **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"replicaSpecs": list(replicas), **spec}}


def replica(
    kind: str = "worker", container: dict[str, Any] | None = None, **extra: Any
) -> dict[str, Any]:
    box = container or {"name": "python", "image": "i", "command": ["python"], "args": ["t.py"]}
    return {"type": kind, "template": {"spec": {"containers": [box]}}, **extra}


def apply_patch(obj: dict[str, Any], patch: list[dict[str, Any]]) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    for op in patch:
        assert op["op"] == "add"
        *parents, last = [
            p.replace("~1", "/").replace("~0", "~") for p in op["path"][1:].split("/")
        ]
        node: Any = out
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        assert last not in node, f"{op['path']} overwrites a value the user wrote"
        node[last] = copy.deepcopy(op["value"])
    return out


# --- defaulting -------------------------------------------------------------------------------


def test_every_documented_default_is_filled() -> None:
    obj = job(
        replica(),
        torchrunConfig={"enabled": True},
        runMode={"debug": {"enabled": True, "replicaSpecs": [{"type": "worker"}]}},
    )
    defaulted, patch = default_job(obj)
    spec = defaulted["spec"]
    assert spec["replicaSpecs"][0]["replicas"] == 1
    assert spec["replicaSpecs"][0]["restartPolicy"] == "OnFailure"
    assert spec["runPolicy"] == {"backoffLimit": 3, "cleanUpPolicy": "None"}
    assert spec["torchrunConfig"] == {
        "enabled": True,
        "maxRestarts": 0,
        "procPerNode": "1",
        "rdzvBackend": "c10d",
    }
    assert spec["runMode"]["debug"]["replicaSpecs"][0] == {
        "type": "worker",
        "skipInitContainer": False,
        "command": ["sleep", "inf"],
    }
    assert apply_patch(obj, patch) == defaulted


def test_written_values_are_never_rewritten() -> None:
    obj = job(
        replica(replicas=4, restartPolicy="Never"),
        runPolicy={"backoffLimit": 0, "cleanUpPolicy": "All"},
    )
    defaulted, patch = default_job(obj)
    assert defaulted["spec"]["replicaSpecs"][0]["replicas"] == 4
    assert defaulted["spec"]["replicaSpecs"][0]["restartPolicy"] == "Never"
    assert defaulted["spec"]["runPolicy"] == {"backoffLimit": 0, "cleanUpPolicy": "All"}
    assert patch == []


def test_torchrun_defaults_only_when_torchrun_is_configured() -> None:
    defaulted, _ = default_job(job(replica()))
    assert "torchrunConfig" not in defaulted["spec"]


def test_defaulting_leaves_wrong_types_for_validation() -> None:
    obj = {"spec": {"replicaSpecs": "oops", "runPolicy": 7}}
    defaulted, patch = default_job(obj)
    assert defaulted == obj
    assert patch == []


def test_json_pointer_escapes() -> None:
    assert pointer("a/b", "c~d", 0) == "/a~1b/c~0d/0"


@pytest.mark.parametrize("stem", [p.stem for p in sorted(DATA.glob("*.yaml"))])
def test_defaulting_t9k_manifests_is_idempotent_and_valid(stem: str) -> None:
    once, patch = default_job(load(stem))
    twice, again = default_job(once)
    assert again == []
    assert twice == once
    assert apply_patch(load(stem), patch) == once
    assert validate(once).errors == []


@settings(max_examples=150, deadline=None)
@given(
    replicas=st.none() | st.integers(1, 9),
    policy=st.none() | st.sampled_from(["Never", "OnFailure", "Always", "ExitCode"]),
    backoff=st.none() | st.integers(0, 9),
    torchrun=st.none()
    | st.fixed_dictionaries(
        {}, optional={"enabled": st.booleans(), "procPerNode": st.sampled_from(["1", "4"])}
    ),
)
def test_defaulting_never_overwrites_and_is_idempotent(
    replicas: int | None, policy: str | None, backoff: int | None, torchrun: dict[str, Any] | None
) -> None:
    extra: dict[str, Any] = {
        k: v for k, v in {"replicas": replicas, "restartPolicy": policy}.items() if v is not None
    }
    spec: dict[str, Any] = {}
    if backoff is not None:
        spec["runPolicy"] = {"backoffLimit": backoff}
    if torchrun is not None:
        spec["torchrunConfig"] = torchrun
    obj = job(replica(**extra), **spec)
    once, patch = default_job(obj)
    assert apply_patch(obj, patch) == once  # apply_patch asserts nothing written is overwritten
    assert default_job(once) == (once, [])


# --- validation -------------------------------------------------------------------------------


def errors_of(obj: dict[str, Any], old: dict[str, Any] | None = None) -> dict[str, str]:
    defaulted, _ = default_job(obj)
    old_defaulted = default_job(old)[0] if old is not None else None
    return {e.path: e.message for e in validate(defaulted, old_defaulted).errors}


# Workers of torchrun, elastic between 1 and 4.
ELASTIC = JobBuilder().replicas("worker").torchrun().elastic(minReplicas=1, maxReplicas=4)


GPU_CONTAINER = {
    "name": "python",
    "image": "i",
    "args": ["t.py"],
    "resources": {"limits": {"nvidia.com/gpu": 2}},
}
CASES: list[tuple[str, dict[str, Any], str, str]] = [
    ("no replica specs", job(), "spec.replicaSpecs", "at least one"),
    ("type upper-case", job(replica("Worker")), "spec.replicaSpecs[0].type", "DNS label"),
    ("type repeated", job(replica(), replica()), "spec.replicaSpecs[1].type", "used by another"),
    (
        "name too long",
        job(replica(replicas=100), name="j" * 55),
        "spec.replicaSpecs[0].type",
        "must fit in 63",
    ),
    (
        "no containers",
        job({"type": "worker", "template": {"spec": {"containers": []}}}),
        "spec.replicaSpecs[0].template.spec.containers",
        "at least one",
    ),
    ("no template", job({"type": "worker"}), "spec.replicaSpecs[0].template.spec", "is required"),
    (
        "container without name",
        job(replica(container={"image": "i"})),
        "spec.replicaSpecs[0].template.spec.containers[0].name",
        "is required",
    ),
    (
        "torchrun without args",
        job(
            replica(container={"name": "c", "image": "i", "command": ["python", "t.py"]}),
            torchrunConfig={"enabled": True},
        ),
        "spec.replicaSpecs[0].template.spec.containers[0].args",
        "put the training script",
    ),
    (
        "gpu without limit",
        job(replica(), torchrunConfig={"enabled": True, "procPerNode": "gpu"}),
        "spec.replicaSpecs[0].template.spec.containers[0].resources.limits",
        "GPU limit",
    ),
    (
        "elastic without torchrun",
        job(replica(), elastic={"enabled": True, "minReplicas": 1, "maxReplicas": 2}),
        "spec.elastic.enabled",
        "needs spec.torchrunConfig.enabled",
    ),
    (
        "elastic min > max",
        job(
            replica(),
            torchrunConfig={"enabled": True},
            elastic={"enabled": True, "minReplicas": 3, "maxReplicas": 2},
        ),
        "spec.elastic.minReplicas",
        "exceeds maxReplicas",
    ),
    (
        "elastic expected outside",
        job(
            replica(),
            torchrunConfig={"enabled": True},
            elastic={"enabled": True, "minReplicas": 2, "maxReplicas": 3, "expectedReplicas": 5},
        ),
        "spec.elastic.expectedReplicas",
        "between",
    ),
    (
        "torchrun spellings disagree",
        job(replica(), torchrunConfig={"enable": True, "enabled": False}),
        "spec.torchrunConfig.enabled",
        "spec.torchrunConfig.enable and spec.torchrunConfig.enabled",
    ),
    (
        "debug spellings disagree",
        job(replica(), runMode={"debug": {"enable": False, "enabled": True}}),
        "spec.runMode.debug.enabled",
        "spec.runMode.debug.enable and spec.runMode.debug.enabled",
    ),
    (
        "minNodes disagrees",
        job(replica(), torchrunConfig={"enabled": True, "minNodes": 1}, elastic={"minReplicas": 2}),
        "spec.elastic.minReplicas",
        "spec.torchrunConfig.minNodes and spec.elastic.minReplicas",
    ),
    (
        "priority 101",
        job(replica(), scheduler={"t9kScheduler": {"queue": "q", "priority": 101}}),
        "spec.scheduler.t9kScheduler.priority",
        "between 0 and 100",
    ),
    (
        "deadline 0",
        job(replica(), runPolicy={"activeDeadlineSeconds": 0}),
        "spec.runPolicy.activeDeadlineSeconds",
        "greater than 0",
    ),
    (
        "backoff -1",
        job(replica(), runPolicy={"backoffLimit": -1}),
        "spec.runPolicy.backoffLimit",
        "not be negative",
    ),
    (
        "fileset scheme",
        job(replica(), tensorboardSpec={"image": "tb", "trainingLogFilesets": ["s3://bucket/log"]}),
        "spec.tensorboardSpec.trainingLogFilesets[0]",
        "'s3' is not supported",
    ),
    (
        "fileset form",
        job(replica(), tensorboardSpec={"image": "tb", "trainingLogFilesets": ["t9k://pvc/"]}),
        "spec.tensorboardSpec.trainingLogFilesets[0]",
        "must be t9k://pvc/<claim>/<subpath>",
    ),
    (
        "fileset with a comma",
        job(replica(), tensorboardSpec={"image": "tb", "trainingLogFilesets": ["t9k://pvc/c/a,b"]}),
        "spec.tensorboardSpec.trainingLogFilesets[0]",
        "must not contain ','",
    ),
    (
        "fileset leaving its claim",
        job(
            replica(), tensorboardSpec={"image": "tb", "trainingLogFilesets": ["t9k://pvc/c/../d"]}
        ),
        "spec.tensorboardSpec.trainingLogFilesets[0]",
        "must not contain '..'",
    ),
    (
        "logDir subPath leaving its claim",
        job(
            replica(),
            tensorboardSpec={
                "image": "tb",
                "logDir": {"pvc": [{"name": "c", "subPath": ["a", ".."]}]},
            },
        ),
        "spec.tensorboardSpec.logDir.pvc[0].subPath[1]",
        "must not contain '..'",
    ),
    (
        "wrong type",
        job(replica(replicas="four")),
        "spec.replicaSpecs[0].replicas",
        "must be an integer",
    ),
    (
        "name with a dot",
        job(replica(), name="resnet.v2"),
        "metadata.name",
        "would name the Service 'resnet.v2-worker-0' of replica 0 of type 'worker', which must be "
        "a DNS-1035 label",
    ),
    ("name starting with a digit", job(replica(), name="1st"), "metadata.name", "DNS-1035"),
    ("name with upper case", job(replica(), name="ResNet"), "metadata.name", "DNS-1035"),
    (
        "name too long for a label value",
        job(replica(), name="j" * 64),
        "metadata.name",
        "is 64 characters; the label batch.tensorstack.dev/job-name",
    ),
    (
        "replicas above maxReplicas",
        ELASTIC.clone().replica_count(9).build(),
        "spec.replicaSpecs[0].replicas",
        "9 replicas are more than spec.elastic.maxReplicas 4; an elastic job runs between 1 and 4",
    ),
    (
        "replicas below minReplicas",
        ELASTIC.clone().replica_count(1).elastic(minReplicas=2, maxReplicas=4).build(),
        "spec.replicaSpecs[0].replicas",
        "1 replica is fewer than spec.elastic.minReplicas 2",
    ),
    (
        "replicas below minNodes",
        JobBuilder().replicas("worker", 1).torchrun(minNodes=2).build(),
        "spec.replicaSpecs[0].replicas",
        "1 replica is fewer than spec.torchrunConfig.minNodes 2",
    ),
    (
        "replicas counted across types",
        ELASTIC.clone().replicas("master", 1).replica_count(4, "worker").build(),
        "spec.replicaSpecs",
        "5 replicas in all (worker 4, master 1) are more than spec.elastic.maxReplicas 4",
    ),
    (
        "expectedReplicas below minNodes",
        JobBuilder()
        .replicas("worker", 2)
        .torchrun(minNodes=2)
        .elastic(maxReplicas=4, expectedReplicas=1)
        .build(),
        "spec.elastic.expectedReplicas",
        "1 is out of bounds: an elastic job runs between 2 and 4 replicas in all",
    ),
    ("top-level unknown field", {**job(replica()), "replica": 2}, "replica", "unknown field"),
    (
        "unknown field in the spec",
        job(replica(replica=2), runPolicy={"backoffLimt": 1}),
        "spec.replicaSpecs[0].replica",
        "unknown field",
    ),
    (
        "unknown field in the template",
        job(replica(container={"name": "python", "image": "i", "resouces": {}})),
        "spec.replicaSpecs[0].template.spec.containers[0].resouces",
        "unknown field",
    ),
    (
        "unknown field in the job's metadata",
        {**job(replica()), "metadata": {"name": "j", "label": {}}},
        "metadata.label",
        "unknown field",
    ),
]


@pytest.mark.parametrize(
    ("obj", "path", "message"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_rule_reports_its_field(obj: dict[str, Any], path: str, message: str) -> None:
    errors = errors_of(obj)
    assert path in errors, errors
    assert message in errors[path]


def test_all_violations_come_back_together() -> None:
    obj = job(
        replica("Bad"),
        replica("Bad"),
        runPolicy={"activeDeadlineSeconds": 0},
        scheduler={"t9kScheduler": {"queue": "q", "priority": 200}},
    )
    assert {
        "spec.replicaSpecs[0].type",
        "spec.replicaSpecs[1].type",
        "spec.runPolicy.activeDeadlineSeconds",
        "spec.scheduler.t9kScheduler.priority",
    } <= set(errors_of(obj))


def test_valid_cases_have_no_errors() -> None:
    assert (
        errors_of(
            job(
                replica(container=GPU_CONTAINER),
                torchrunConfig={"enabled": True, "procPerNode": "gpu"},
            )
        )
        == {}
    )
    assert (
        errors_of(
            job(
                replica(),
                tensorboardSpec={
                    "image": "tb",
                    "trainingLogFilesets": ["t9k://pvc/claim/log/run1"],
                },
            )
        )
        == {}
    )
    assert (
        errors_of(
            job(
                replica(
                    container={
                        "name": "python",
                        "image": "i",
                        "resources": {"limits": {"nvidia.com/gpu": "4"}},
                        "args": ["a"],
                    }
                ),
                torchrunConfig={"enable": True, "enabled": True, "procPerNode": "gpu"},
            )
        )
        == {}
    )


def test_generate_name_counts_toward_the_length() -> None:
    obj = job(replica(replicas=10))
    obj["metadata"] = {"generateName": "g" * 50}
    assert "spec.replicaSpecs[0].type" in errors_of(obj)


def test_warnings_for_user_env_and_etcd_without_endpoint() -> None:
    container = {
        "name": "python",
        "image": "i",
        "args": ["t.py"],
        "env": [{"name": "MASTER_PORT", "value": "1"}],
    }
    defaulted, _ = default_job(
        job(replica(container=container), torchrunConfig={"enabled": True, "rdzvBackend": "etcd"})
    )
    result = validate(defaulted)
    assert result.allowed
    assert any("MASTER_PORT is set by you" in w for w in result.warnings)
    assert any("--rdzv-endpoint" in w for w in result.warnings)
    defaulted["spec"]["torchrunConfig"]["extraOptions"] = ["--rdzv-endpoint=etcd:2379"]
    assert not any("--rdzv-endpoint" in w for w in validate(defaulted).warnings)


# --- update rules: compare the old object with the new one ------------------------------------


def test_replica_specs_are_immutable() -> None:
    old = job(replica(replicas=2))
    assert "spec.replicaSpecs" in errors_of(job(replica(replicas=3)), old)
    assert errors_of(job(replica(replicas=2)), old) == {}


def test_elastic_job_may_change_replicas_only() -> None:
    two, three = (ELASTIC.clone().replica_count(n).build() for n in (2, 3))
    assert errors_of(three, two) == {}
    changed = ELASTIC.clone().replica_count(3).restart_policy("Never").build()
    assert "spec.replicaSpecs" in errors_of(changed, two)


def test_elastic_bounds_are_immutable() -> None:
    wider = ELASTIC.clone().replica_count(2).elastic(minReplicas=1, maxReplicas=5).build()
    assert "spec.elastic" in errors_of(wider, ELASTIC.clone().replica_count(2).build())


def test_resume_specs_are_immutable() -> None:
    old = job(
        replica(),
        runMode={"pause": {"enabled": True, "resumeSpecs": [{"type": "worker", "command": ["a"]}]}},
    )
    new = copy.deepcopy(old)
    new["spec"]["runMode"]["pause"]["resumeSpecs"][0]["command"] = ["b"]
    assert "spec.runMode.pause.resumeSpecs" in errors_of(new, old)
    new["spec"]["runMode"]["pause"] = {
        "enabled": False,
        "resumeSpecs": [{"type": "worker", "command": ["a"]}],
    }
    assert errors_of(new, old) == {}


def test_elastic_replicas_within_bounds_are_valid_at_any_count() -> None:
    for count in (1, 2, 4):
        assert errors_of(ELASTIC.clone().replica_count(count).build()) == {}
    expected = ELASTIC.clone().replica_count(2).elastic(minReplicas=1, maxReplicas=4)
    assert (
        errors_of(expected.elastic(minReplicas=1, maxReplicas=4, expectedReplicas=4).build()) == {}
    )


@settings(max_examples=200, deadline=None)
@given(
    low=st.integers(min_value=1, max_value=6),
    high=st.integers(min_value=1, max_value=6),
    counts=st.lists(st.integers(min_value=1, max_value=5), min_size=1, max_size=3),
    expected=st.none() | st.integers(min_value=1, max_value=8),
)
def test_elastic_counts_are_refused_exactly_outside_the_bounds(
    low: int, high: int, counts: list[int], expected: int | None
) -> None:
    builder = JobBuilder().torchrun()
    for index, count in enumerate(counts):
        builder.replicas(f"t{index}", count)
    bounds = {"minReplicas": low, "maxReplicas": high}
    builder.elastic(**bounds, **({} if expected is None else {"expectedReplicas": expected}))
    errors = errors_of(builder.build())
    total = sum(counts)
    path = "spec.replicaSpecs[0].replicas" if len(counts) == 1 else "spec.replicaSpecs"
    if low > high:
        assert set(errors) == {"spec.elastic.minReplicas"}
        return
    assert (path in errors) == (not low <= total <= high)
    assert ("spec.elastic.expectedReplicas" in errors) == (
        expected is not None and not low <= expected <= high
    )
    if path in errors:
        assert f"between {low} and {high}" in errors[path]


def test_elastic_bounds_hold_on_update() -> None:
    two, nine = (ELASTIC.clone().replica_count(n).build() for n in (2, 9))
    assert errors_of(nine, two) == {
        "spec.replicaSpecs[0].replicas": "9 replicas are more than spec.elastic.maxReplicas 4; "
        "an elastic job runs between 1 and 4 replicas in all"
    }
    scaled = ELASTIC.clone().replica_count(2).elastic(minReplicas=1, maxReplicas=4)
    assert "spec.elastic.expectedReplicas" in errors_of(
        scaled.elastic(minReplicas=1, maxReplicas=4, expectedReplicas=5).build(), two
    )


def test_a_rule_the_old_object_broke_does_not_refuse_an_update() -> None:
    """Ratcheting: a job stored before a rule existed keeps its changes of metadata (finalizers,
    labels) and may be brought back within the rules; a value changed into another violation is
    still refused."""
    stored = ELASTIC.clone().name("resnet.v2").replica_count(9).build()
    labelled = copy.deepcopy(stored)
    labelled["metadata"]["labels"] = {"team": "a"}
    assert errors_of(labelled, stored) == {}
    fewer = ELASTIC.clone().name("resnet.v2").replica_count(5).build()
    assert "spec.replicaSpecs[0].replicas" in errors_of(fewer, stored)  # another count, refused
    # Back within the bounds: the name, unchanged since it was stored, does not refuse it.
    assert errors_of(ELASTIC.clone().name("resnet.v2").replica_count(4).build(), stored) == {}


@settings(max_examples=200, deadline=None)
@given(name=st.from_regex(r"[a-z0-9.-]{1,70}", fullmatch=True))
def test_a_job_name_is_refused_exactly_when_a_service_could_not_carry_it(name: str) -> None:
    errors = errors_of(job(replica(), name=name))
    service = f"{name}-worker-0"
    valid = (
        re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", name) is not None
        and len(name) <= 63
        and len(service) <= 63
    )
    named = "metadata.name" in errors or "spec.replicaSpecs[0].type" in errors
    assert named != valid, errors


@pytest.mark.parametrize("choice", ["native", "volcano", "coscheduling", "none"])
def test_a_job_may_choose_its_gang_scheduling(choice: str) -> None:
    manifest = job(replica())
    manifest["metadata"]["annotations"] = {"batch.tensorstack.dev/gang-scheduling": choice}
    assert validate(default_job(manifest)[0]).errors == []


def test_an_unknown_gang_scheduling_choice_is_refused_naming_the_annotation() -> None:
    manifest = job(replica())
    manifest["metadata"]["annotations"] = {"batch.tensorstack.dev/gang-scheduling": "kueue"}
    errors = [str(e) for e in validate(default_job(manifest)[0]).errors]
    assert errors == [
        "metadata.annotations[batch.tensorstack.dev/gang-scheduling]: 'kueue' is not one of "
        "native, volcano, coscheduling, none"
    ]
