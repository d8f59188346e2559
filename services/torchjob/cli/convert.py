"""`torchjob convert JOB.yaml`: a job manifest of one API turned into another's, as YAML.

A Kubeflow PyTorchJob (`kubeflow.org/v1`) becomes the PyTorchTrainingJob that runs it on a
cluster (`as_training_job` of the defaulted PyTorchJob); a PyTorchTrainingJob becomes the
PyTorchJob that runs the same replicas: `master`/`worker` as `Master`/`Worker`, the run policy's
names in Kubeflow's spelling, `runMode.pause` as `runPolicy.suspend`, `elastic` as
`elasticPolicy` (Kubeflow's bounds count Workers only), torchrun's `procPerNode` as
`nprocPerNode`, and the training container named `pytorch`, as Kubeflow requires. Either input is
first admitted as the webhook admits it (defaults, then validation), and the output is defaulted
and validated by the other API's rules. A field the other API cannot express is refused, naming
it, unless `--drop-unsupported` is given: then it is left out and each one is reported on stderr.
What becomes of each field of either spec is listed in cli/convert_fields.py, which a test keeps
complete. A Kubeflow Trainer TrainJob converts to and from a PyTorchJob (cli/convert_trainer.py),
and to and from a PyTorchTrainingJob through one. Only the metadata's name, generateName,
namespace, labels and annotations are kept, and no status.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import yaml

from torchjob.api import types
from torchjob.api.defaults import default_job
from torchjob.api.job_api import KUBEFLOW_JOB, TRAIN_JOB, TRAINING_JOB
from torchjob.api.jsoncopy import json_copy
from torchjob.api.kubeflow import (
    DEFAULT_CONTAINER,
    KUBEFLOW_MANAGER,
    MASTER,
    kubeflow_run_policy,
    kubeflow_type_of,
)
from torchjob.api.kubeflow_admission import default_pytorchjob, validate_pytorchjob
from torchjob.api.queries import TRAINING_CONTAINER_NAME
from torchjob.api.validation import validate
from torchjob.cli.convert_fields import (
    PYTORCHJOB_FIELDS,
    PYTORCHJOB_TO_TRAINJOB_FIELDS,
    TRAINING_JOB_FIELDS,
    TRAINJOB_FIELDS,
    Fate,
)
from torchjob.cli.convert_trainer import (
    NotConvertible,
    pytorchjob_to_trainjob,
    trainjob_to_pytorchjob,
)
from torchjob.cli.manifest import InvalidManifest, admit, read_manifest, training_job_of
from torchjob.render.job_kinds import written_api

EXIT_CONVERTED, EXIT_INVALID = 0, 2
TO_KUBEFLOW: Final = "kubeflow"
TO_TORCHJOB: Final = "torchjob"
TO_TRAINER: Final = "trainer"
# The `--to` name of each API, and what a manifest of it converts to by default.
TARGET_NAMES: Final = {TRAINING_JOB: TO_TORCHJOB, KUBEFLOW_JOB: TO_KUBEFLOW, TRAIN_JOB: TO_TRAINER}
DEFAULT_TARGETS: Final = {
    TO_TORCHJOB: TO_KUBEFLOW,
    TO_KUBEFLOW: TO_TORCHJOB,
    TO_TRAINER: TO_TORCHJOB,
}
KEPT_METADATA: Final = ("name", "generateName", "namespace", "labels", "annotations")
# The rendezvous backend a PyTorchJob's elasticPolicy uses when it names none.
KUBEFLOW_RDZV_BACKEND: Final = "c10d"


class Unconvertible(Exception):
    """What the other API cannot express; `errors` are `field.path: why` lines."""

    def __init__(self, errors: list[str]) -> None:
        super().__init__("; ".join(errors))
        self.errors = errors


class _Dropped:
    """The fields the other API cannot express: refused, or with `drop`, left out and listed;
    each one says why as its row of `fates` (cli/convert_fields.py) does."""

    def __init__(self, drop: bool, fates: Mapping[str, Fate]) -> None:
        self.drop = drop
        self.fates = fates
        self.fields: list[str] = []  # `path: why`

    def add(self, row: str, *, path: str = "", value: object = None) -> None:
        """The field of `row` (at `path` for an item of a list), naming its `value` when given."""
        why = self.fates[row].refused
        self.fields.append(f"{path or row}: " + (why if value is None else f"{value!r}: {why}"))


def add_convert_command(commands: Any) -> None:
    convert = commands.add_parser(
        "convert",
        help="turn a job of one API into another's: PyTorchTrainingJob, PyTorchJob, TrainJob",
        description="Print a job manifest in another API: a Kubeflow PyTorchJob "
        "(kubeflow.org/v1) as the PyTorchTrainingJob that runs it, a PyTorchTrainingJob as a "
        "PyTorchJob, a Kubeflow Trainer TrainJob (with its training runtime in the same file) "
        "as either, or either as a TrainJob of the torch-distributed runtime (--to trainer). The "
        "input is defaulted and validated first. A field the other API cannot express is "
        "refused, naming it, unless --drop-unsupported is given.",
    )
    convert.add_argument("manifest", metavar="JOB.yaml", help="the job's manifest ('-' for stdin)")
    convert.add_argument(
        "--to",
        choices=(TO_KUBEFLOW, TO_TORCHJOB, TO_TRAINER),
        help="the API to write (default: a PyTorchTrainingJob's is kubeflow, any other's "
        "torchjob): kubeflow = PyTorchJob, torchjob = PyTorchTrainingJob, trainer = TrainJob",
    )
    convert.add_argument(
        "-o", "--output", metavar="FILE", type=Path, help="write the YAML here (default: stdout)"
    )
    convert.add_argument(
        "--drop-unsupported",
        action="store_true",
        help="leave out what the other API cannot express, listing each field on stderr",
    )


def run_convert(args: argparse.Namespace) -> int:
    try:
        document = read_manifest(args.manifest)
        converted, dropped = convert(document, args.to, drop_unsupported=args.drop_unsupported)
    except (InvalidManifest, Unconvertible) as error:
        for line in error.errors:
            sys.stderr.write(f"error: {line}\n")
        return EXIT_INVALID
    for line in dropped:
        sys.stderr.write(f"dropped: {line}\n")
    text = yaml.safe_dump(converted, sort_keys=False)
    if args.output is None:
        sys.stdout.write(text)
    else:
        try:
            args.output.write_text(text)
        except OSError as error:
            sys.stderr.write(f"error: {args.output}: {error.strerror or error}\n")
            return EXIT_INVALID
    return EXIT_CONVERTED


def convert(
    document: dict[str, Any], to: str | None = None, *, drop_unsupported: bool = False
) -> tuple[dict[str, Any], list[str]]:
    """`document` in the API `to` (None: the other one), and the fields left out (with
    `drop_unsupported`; without it they are refused)."""
    source = TARGET_NAMES[written_api(document)]
    target = to or DEFAULT_TARGETS[source]
    if target == source:
        raise Unconvertible(
            [f"kind: the manifest is a {document.get('kind')} already (--to {target})"]
        )
    try:
        out, dropped = _converted(document, source, target, drop_unsupported)
    except NotConvertible as error:
        raise Unconvertible(error.errors) from error
    if dropped.fields and not drop_unsupported:
        raise Unconvertible(
            [*dropped.fields, "(--drop-unsupported converts the job without these fields)"]
        )
    return out, dropped.fields


def _converted(
    document: dict[str, Any], source: str, target: str, drop: bool
) -> tuple[dict[str, Any], _Dropped]:
    """`document` of the API `source` in the API `target`, through a PyTorchJob where neither
    is one, and what was refused (or dropped) on the way."""
    if source == TO_TORCHJOB:
        dropped = _Dropped(drop, TRAINING_JOB_FIELDS)
        pytorchjob = to_pytorchjob(document, dropped)
        if target == TO_KUBEFLOW:
            return pytorchjob, dropped
        dropped.fates = {**dropped.fates, **PYTORCHJOB_TO_TRAINJOB_FIELDS}
        return pytorchjob_to_trainjob(pytorchjob, dropped.add), dropped
    if source == TO_TRAINER:
        pytorchjob = trainjob_to_pytorchjob(document, _rename_container)
        pytorchjob["metadata"] = _metadata(document)
        if target == TO_KUBEFLOW:
            return pytorchjob, _Dropped(drop, TRAINJOB_FIELDS)
        document = pytorchjob
    if target == TO_TRAINER:
        dropped = _Dropped(drop, PYTORCHJOB_TO_TRAINJOB_FIELDS)
        out = pytorchjob_to_trainjob(document, dropped.add)
        out["metadata"] = _metadata(document)
        return out, dropped
    dropped = _Dropped(drop, PYTORCHJOB_FIELDS)
    return to_training_job(document, dropped), dropped


def _metadata(document: dict[str, Any]) -> dict[str, Any]:
    meta = document.get("metadata") or {}
    return {key: json_copy(meta[key]) for key in KEPT_METADATA if meta.get(key)}


# -- PyTorchJob -> PyTorchTrainingJob -------------------------------------------------------------


def to_training_job(document: dict[str, Any], dropped: _Dropped) -> dict[str, Any]:
    """The PyTorchTrainingJob that runs the PyTorchJob `document` (defaulted, validated)."""
    pytorchjob, _ = default_pytorchjob(document)
    result = validate_pytorchjob(pytorchjob)
    if not result.allowed:
        raise InvalidManifest([str(e) for e in result.errors])
    spec = pytorchjob.get("spec") or {}
    _kubeflow_only(spec, dropped)
    if "elasticPolicy" in spec:
        spec = {k: v for k, v in spec.items() if k != "elasticPolicy"}
        pytorchjob = {**pytorchjob, "spec": spec}
    job = training_job_of(pytorchjob, KUBEFLOW_JOB)
    # Without a backoffLimit Kubeflow restarts without limit: the largest one, written out.
    out_spec = json_copy(job["spec"])
    for replica in out_spec.get("replicaSpecs") or []:
        kind = kubeflow_type_of(str(replica.get("type", "")))
        path = f"spec.pytorchReplicaSpecs.{kind}.template.spec.containers"
        _rename_container(replica, DEFAULT_CONTAINER, TRAINING_CONTAINER_NAME, path)
    out = {
        "apiVersion": types.API_VERSION,
        "kind": types.KIND,
        "metadata": _metadata(document),
        "spec": out_spec,
    }
    defaulted, _ = default_job(out)
    checked = validate(defaulted, schema=True)
    if not checked.allowed:
        raise Unconvertible(
            [f"the PyTorchTrainingJob would be refused: {e}" for e in checked.errors]
        )
    return defaulted


def _kubeflow_only(spec: dict[str, Any], dropped: _Dropped) -> None:
    """What a PyTorchTrainingJob has no place for."""
    run_policy = spec.get("runPolicy") or {}
    if run_policy.get("schedulingPolicy") is not None:
        dropped.add("spec.runPolicy.schedulingPolicy")
    manager = run_policy.get("managedBy")
    if manager and manager != KUBEFLOW_MANAGER:
        dropped.add("spec.runPolicy.managedBy", value=manager)
    nproc = spec.get("nprocPerNode")
    if nproc is not None and nproc != "auto":
        dropped.add("spec.nprocPerNode", value=nproc)
    if spec.get("elasticPolicy") is not None:
        dropped.add("spec.elasticPolicy")


# -- PyTorchTrainingJob -> PyTorchJob -------------------------------------------------------------


def to_pytorchjob(document: dict[str, Any], dropped: _Dropped) -> dict[str, Any]:
    """The PyTorchJob that runs the PyTorchTrainingJob `document` (defaulted, validated)."""
    job = admit(document).manifest
    spec = job.get("spec") or {}
    errors: list[str] = []
    replica_specs = _kubeflow_replica_specs(spec, errors, dropped)
    if errors:
        raise Unconvertible(errors)
    out_spec: dict[str, Any] = {"pytorchReplicaSpecs": replica_specs}
    out_spec["runPolicy"] = _kubeflow_run_policy(spec, dropped)
    masters = 1 if MASTER in replica_specs else 0
    out_spec.update(_kubeflow_torchrun(spec, masters, dropped))
    for row in _unexpressible_sections(spec):
        dropped.add(row)
    out = {
        "apiVersion": KUBEFLOW_JOB.api_version,
        "kind": KUBEFLOW_JOB.kind,
        "metadata": _metadata(document),
        "spec": out_spec,
    }
    defaulted, _ = default_pytorchjob(out)
    checked = validate_pytorchjob(defaulted)
    if not checked.allowed:
        raise Unconvertible([f"the PyTorchJob would be refused: {e}" for e in checked.errors])
    return defaulted


def _kubeflow_replica_specs(
    spec: dict[str, Any], errors: list[str], dropped: _Dropped
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for index, replica in enumerate(spec.get("replicaSpecs") or []):
        path = f"spec.replicaSpecs[{index}]"
        kind = str(replica.get("type", ""))
        if kind not in ("master", "worker"):
            errors.append(
                f"{path}.type: {kind!r} has no PyTorchJob replica type: a PyTorchJob has "
                "Master and Worker only"
            )
            continue
        kubeflow_kind = kubeflow_type_of(kind)
        replicas = replica.get("replicas", 1)
        if kubeflow_kind == MASTER and replicas != 1:
            errors.append(
                f"{path}.replicas: {replicas} master replicas: a PyTorchJob's Master has "
                "exactly 1 replica"
            )
            continue
        converted = {
            key: json_copy(replica[key])
            for key in ("replicas", "restartPolicy", "template")
            if replica.get(key) is not None
        }
        if replica.get("scalingWeight") is not None:
            dropped.add("spec.replicaSpecs[].scalingWeight", path=f"{path}.scalingWeight")
        _rename_container(
            converted,
            TRAINING_CONTAINER_NAME,
            DEFAULT_CONTAINER,
            f"{path}.template.spec.containers",
        )
        out[kubeflow_kind] = converted
    return out


def _kubeflow_run_policy(spec: dict[str, Any], dropped: _Dropped) -> dict[str, Any]:
    out = kubeflow_run_policy(spec.get("runPolicy") or {})
    pause = (spec.get("runMode") or {}).get("pause") or {}
    if pause.get("enabled") or pause.get("enable"):
        out["suspend"] = True
    if pause.get("resumeSpecs"):
        dropped.add("spec.runMode.pause.resumeSpecs")
    return out


def _kubeflow_torchrun(spec: dict[str, Any], masters: int, dropped: _Dropped) -> dict[str, Any]:
    """The PyTorchJob's nprocPerNode and elasticPolicy from torchrun's settings and the elastic
    bounds (which count Workers only in Kubeflow)."""
    out: dict[str, Any] = {}
    torchrun = spec.get("torchrunConfig") or {}
    torchrun_on = bool(torchrun.get("enabled") or torchrun.get("enable"))
    if torchrun_on:
        dropped.add("spec.torchrunConfig.enabled")
        if torchrun.get("procPerNode") is not None:
            out["nprocPerNode"] = str(torchrun["procPerNode"])
        if torchrun.get("minNodes") is not None:
            dropped.add("spec.torchrunConfig.minNodes")
        if torchrun.get("extraOptions"):
            dropped.add("spec.torchrunConfig.extraOptions")
    backend = torchrun.get("rdzvBackend") if torchrun_on else None
    elastic = spec.get("elastic") or {}
    if elastic.get("enabled"):
        policy: dict[str, Any] = {}
        for key in ("minReplicas", "maxReplicas"):
            if isinstance(elastic.get(key), int):
                policy[key] = elastic[key] - masters
        if torchrun_on and torchrun.get("maxRestarts"):
            policy["maxRestarts"] = torchrun["maxRestarts"]
        if backend and backend != KUBEFLOW_RDZV_BACKEND:
            policy["rdzvBackend"] = backend
        if elastic.get("expectedReplicas") is not None:
            dropped.add("spec.elastic.expectedReplicas")
        out["elasticPolicy"] = policy
        return out
    if torchrun_on and torchrun.get("maxRestarts"):
        dropped.add("spec.torchrunConfig.maxRestarts")
    if backend and backend != KUBEFLOW_RDZV_BACKEND:
        dropped.add("spec.torchrunConfig.rdzvBackend")
    return out


def _unexpressible_sections(spec: dict[str, Any]) -> list[str]:
    """The rows of the sections a PyTorchJob has no place for that `spec` sets."""
    found = []
    if spec.get("tensorboardSpec") is not None:
        found.append("spec.tensorboardSpec")
    debug = (spec.get("runMode") or {}).get("debug") or {}
    if debug.get("enabled") or debug.get("enable"):
        found.append("spec.runMode.debug")
    if (spec.get("scheduler") or {}).get("t9kScheduler") is not None:
        found.append("spec.scheduler.t9kScheduler")
    return found


def _rename_container(replica: dict[str, Any], old: str, new: str, path: str) -> None:
    """The training container (named `old`, else the first) named `new`; refused when another
    container has that name already."""
    pod_spec = (replica.get("template") or {}).get("spec") or {}
    containers = pod_spec.get("containers") or []
    names = [c.get("name") if isinstance(c, dict) else None for c in containers]
    if not containers:
        return
    index = names.index(old) if old in names else 0
    if new in names and names.index(new) != index:
        raise Unconvertible(
            [
                f"{path}[{names.index(new)}].name: {new!r} names another container than the "
                f"training one ({path}[{index}]); rename it"
            ]
        )
    containers[index]["name"] = new
