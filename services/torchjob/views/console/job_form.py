"""The console's job form, as data: the fields a data scientist fills (T9k's PyTorch form), the
PyTorchTrainingJob they make, the form a manifest makes back (the YAML view's round trip), and the
form field an API error names.

The form's fields fill in the job recipe (`recipe_of_form`, render/recipe.py) that
`torchjob submit`'s flags fill in too; the recipe is rendered in the kind the user picked. The
manifest holds only what the user gave: the webhook fills the defaults, and the cluster's own
checks (the CRD's schema, the webhook, the apiserver) judge every value, so a number typed as
`two` is sent as written and refused with the cluster's message beside its field. Only a command
line that cannot be split is refused here, since it has no manifest to send."""

from __future__ import annotations

import dataclasses
import re
import shlex
from dataclasses import dataclass
from typing import Any

from torchjob.api.job_api import TRAINING_JOB
from torchjob.render.job_kinds import kind_of
from torchjob.render.recipe import (
    Count,
    JobRecipe,
    NoPlace,
    RendersRecipes,
    TensorBoard,
    Volume,
    render_job,
)
from torchjob.views.console.command_line import container_command, line_of_container

CONTAINER = "pytorch"
DATA_VOLUME = "data"
SHM_VOLUME = "dshm"
SHM_PATH = "/dev/shm"
GPU = "nvidia.com/gpu"
RESTART_POLICIES = ("Never", "OnFailure", "Always", "ExitCode")
CLEAN_UP_POLICIES = ("None", "All", "Unfinished")
INTEGER = re.compile(r"-?[0-9]+")
# The form field of each recipe field (render/recipe.py) whose name differs.
# The form field a recipe field comes from, where their names differ; the memory volume is the
# form's volume that is on unless turned off (a claim's mount is the other).
FORM_FIELD_OF = {"queue_priority": "priority", "volumes": "shm"}

Manifest = dict[str, Any]


@dataclass(frozen=True)
class JobForm:
    """The form's fields as typed (text, since a form posts text), and its switches."""

    name: str = ""
    torchrun: bool = True
    proc_per_node: str = ""
    max_restarts: str = ""
    replicas: str = ""
    image: str = ""
    command_line: str = ""
    working_dir: str = ""
    cpu_request: str = ""
    memory_request: str = ""
    cpu_limit: str = ""
    memory_limit: str = ""
    gpus: str = ""
    pvc_claim: str = ""
    pvc_mount_path: str = ""
    shm: bool = True
    restart_policy: str = ""
    backoff_limit: str = ""
    active_deadline_seconds: str = ""
    clean_up_policy: str = ""
    tensorboard: bool = False
    tensorboard_image: str = ""
    tensorboard_log_path: str = ""
    queue: str = ""
    priority: str = ""


SWITCHES = tuple(f.name for f in dataclasses.fields(JobForm) if f.type == "bool")
TEXTS = tuple(f.name for f in dataclasses.fields(JobForm) if f.type == "str")


class UnreadableField(ValueError):
    """A field whose text makes no manifest (a command line with an unclosed quote)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@dataclass(frozen=True)
class NotShown:
    """Why the form cannot show a manifest: the YAML stays the source."""

    reasons: tuple[str, ...]

    def __str__(self) -> str:
        return "; ".join(self.reasons)


def form_from_fields(fields: dict[str, str]) -> JobForm:
    """The form a browser posted: a checkbox is on when it is sent at all."""
    values: dict[str, Any] = {name: str(fields.get(name, "")).strip() for name in TEXTS}
    values.update({name: name in fields for name in SWITCHES})
    return JobForm(**values)


class NoFormPlace(ValueError):
    """Fields the form has filled that the kind picked has no place for, each with why."""

    def __init__(self, fields: dict[str, str]) -> None:
        super().__init__("; ".join(f"{name}: {message}" for name, message in fields.items()))
        self.fields = fields


def manifest_of(form: JobForm) -> Manifest:
    """The PyTorchTrainingJob of `form`, with only what the form gives."""
    return kind_manifest_of(form, kind_of(TRAINING_JOB))


def kind_manifest_of(form: JobForm, kind: RendersRecipes) -> Manifest:
    """The job of `kind` that `form` describes, with only what the form gives; NoFormPlace for
    the fields it fills that `kind` has no place for, said before an UnreadableField."""
    try:
        recipe = recipe_of_form(form)
    except UnreadableField:
        # What has no place is said first: the form's other fields, without the line.
        _render(recipe_of_form(dataclasses.replace(form, command_line="")), kind)
        raise
    return _render(recipe, kind)


def _render(recipe: JobRecipe, kind: RendersRecipes) -> Manifest:
    try:
        return render_job(recipe, kind)
    except NoPlace as refusal:
        fields = {FORM_FIELD_OF.get(name, name): why for name, why in refusal.fields.items()}
        raise NoFormPlace(fields) from None


def recipe_of_form(form: JobForm) -> JobRecipe:
    """The job recipe the form's fields fill in (render/recipe.py), as `torchjob submit`'s flags
    fill it in; UnreadableField for a command line that cannot be split."""
    command, args = container_command(_words("command_line", form.command_line), form.torchrun)
    requests = {"cpu": form.cpu_request, "memory": form.memory_request}
    limits = {"cpu": form.cpu_limit, "memory": form.memory_limit, GPU: form.gpus}
    return JobRecipe(
        name=form.name or None,
        replicas=_count(form.replicas),
        restart_policy=form.restart_policy or None,
        container=CONTAINER,
        image=form.image or None,
        command=tuple(command),
        args=tuple(args),
        working_dir=form.working_dir or None,
        requests=tuple((name, value) for name, value in requests.items() if value),
        limits=tuple((name, value) for name, value in limits.items() if value),
        volumes=_volumes(form),
        queue=form.queue or None,
        queue_priority=_count(form.priority),
        torchrun=form.torchrun,
        proc_per_node=form.proc_per_node or None,
        max_restarts=_count(form.max_restarts),
        backoff_limit=_count(form.backoff_limit),
        active_deadline_seconds=_count(form.active_deadline_seconds),
        clean_up_policy=form.clean_up_policy or None,
        tensorboard=_tensorboard(form),
    )


def _count(text: str) -> Count | None:
    """A whole number as a number; anything else as written, for the cluster to judge."""
    if not text:
        return None
    return int(text) if INTEGER.fullmatch(text) else text


def _words(field: str, line: str) -> list[str]:
    try:
        return shlex.split(line)
    except ValueError as error:
        raise UnreadableField(field, f"cannot be split into words: {error}") from None


def _volumes(form: JobForm) -> tuple[Volume, ...]:
    volumes = []
    if form.pvc_claim or form.pvc_mount_path:
        volumes.append(Volume(DATA_VOLUME, form.pvc_mount_path, claim=form.pvc_claim))
    if form.shm:
        volumes.append(Volume(SHM_VOLUME, SHM_PATH, memory=True))
    return tuple(volumes)


def _tensorboard(form: JobForm) -> TensorBoard | None:
    if not form.tensorboard:
        return None
    logs = form.pvc_claim or form.tensorboard_log_path
    return TensorBoard(
        image=form.tensorboard_image or None,
        log_claim=form.pvc_claim if logs else None,
        log_path=form.tensorboard_log_path or None,
    )


def form_of(manifest: Any) -> JobForm | NotShown:
    """The form that makes `manifest` again, or why there is none: the form shows one replica
    type of one container, so anything beyond it (a second type, a sidecar, a field the form
    has no input for) leaves the manifest to the YAML view."""
    if not isinstance(manifest, dict):
        return NotShown(("the YAML is not a mapping",))
    spec = _mapping(manifest.get("spec"))
    replicas = spec.get("replicaSpecs")
    if not isinstance(replicas, list) or len(replicas) != 1 or not isinstance(replicas[0], dict):
        count = len(replicas) if isinstance(replicas, list) else 0
        return NotShown((f"the form shows one replica type; this job has {count}",))
    pod = _mapping(_mapping(replicas[0].get("template")).get("spec"))
    containers = pod.get("containers")
    if not isinstance(containers, list) or len(containers) != 1:
        count = len(containers) if isinstance(containers, list) else 0
        return NotShown((f"the form shows one container; this job has {count}",))
    try:
        form = _read_form(manifest, spec, replicas[0], pod, _mapping(containers[0]))
    except (TypeError, ValueError, AttributeError) as error:
        return NotShown((f"a field has a shape the form cannot show: {error}",))
    differences = list(_differences(manifest, manifest_of(form), ""))
    if differences:
        return NotShown(tuple(f"the form has no input for {path}" for path in differences[:8]))
    return form


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool | dict | list):
        raise TypeError(f"{value!r} is not a single value")
    return str(value)


def _read_form(
    manifest: Manifest, spec: Manifest, replica: Manifest, pod: Manifest, container: Manifest
) -> JobForm:
    torchrun = _mapping(spec.get("torchrunConfig"))
    policy = _mapping(spec.get("runPolicy"))
    t9k = _mapping(_mapping(spec.get("scheduler")).get("t9kScheduler"))
    resources = _mapping(container.get("resources"))
    requests, limits = _mapping(resources.get("requests")), _mapping(resources.get("limits"))
    claim = _data_claim(pod)
    tensorboard = spec.get("tensorboardSpec")
    return JobForm(
        name=_text(_mapping(manifest.get("metadata")).get("name")),
        torchrun=torchrun.get("enabled") is True,
        proc_per_node=_text(torchrun.get("procPerNode")),
        max_restarts=_text(torchrun.get("maxRestarts")),
        replicas=_text(replica.get("replicas")),
        image=_text(container.get("image")),
        command_line=_command_line(container, torchrun.get("enabled") is True),
        working_dir=_text(container.get("workingDir")),
        cpu_request=_text(requests.get("cpu")),
        memory_request=_text(requests.get("memory")),
        cpu_limit=_text(limits.get("cpu")),
        memory_limit=_text(limits.get("memory")),
        gpus=_text(limits.get(GPU)),
        pvc_claim=claim,
        pvc_mount_path=_mount_path(container, DATA_VOLUME),
        shm=any(v.get("name") == SHM_VOLUME for v in pod.get("volumes") or []),
        restart_policy=_text(replica.get("restartPolicy")),
        backoff_limit=_text(policy.get("backoffLimit")),
        active_deadline_seconds=_text(policy.get("activeDeadlineSeconds")),
        clean_up_policy=_text(policy.get("cleanUpPolicy")),
        tensorboard=tensorboard is not None,
        tensorboard_image=_text(_mapping(tensorboard).get("image")),
        tensorboard_log_path=_log_path(_mapping(tensorboard)),
        queue=_text(t9k.get("queue")),
        priority=_text(t9k.get("priority")),
    )


def _command_line(container: Manifest, torchrun: bool) -> str:
    command, args = container.get("command") or [], container.get("args") or []
    words = [*command, *args] if isinstance(command, list) and isinstance(args, list) else [None]
    if not all(isinstance(word, str) for word in words):
        raise TypeError("a command or its args hold a word that is not text")
    return shlex.join(line_of_container(list(command), list(args), torchrun))


def _data_claim(pod: Manifest) -> str:
    for volume in pod.get("volumes") or []:
        if volume.get("name") == DATA_VOLUME:
            return _text(_mapping(volume.get("persistentVolumeClaim")).get("claimName"))
    return ""


def _mount_path(container: Manifest, volume: str) -> str:
    for mount in container.get("volumeMounts") or []:
        if mount.get("name") == volume:
            return _text(mount.get("mountPath"))
    return ""


def _log_path(tensorboard: Manifest) -> str:
    sources = _mapping(tensorboard.get("logDir")).get("pvc") or []
    paths = _mapping(sources[0]).get("subPath") if sources else None
    return _text(paths[0]) if paths else ""


def _differences(written: Any, shown: Any, path: str) -> Any:
    """The paths where the manifest the form would write differs from the one given."""
    if _mapping_or_none(written) and _mapping_or_none(shown):
        written, shown = _mapping(written), _mapping(shown)
        for key in sorted(set(written) | set(shown)):
            yield from _differences(written.get(key), shown.get(key), _join(path, key))
    elif isinstance(written, list) and isinstance(shown, list) and len(written) == len(shown):
        for index, (one, other) in enumerate(zip(written, shown, strict=True)):
            yield from _differences(one, other, f"{path}[{index}]")
    elif not _same_value(written, shown, path):
        yield path


def _mapping_or_none(value: Any) -> bool:
    return value is None or isinstance(value, dict)


def _join(path: str, key: str) -> str:
    if not path:
        return key
    return f"{path}.{key}" if path and "." not in key and "/" not in key else f"{path}[{key}]"


def _same_value(written: Any, shown: Any, path: str) -> bool:
    if written == shown and type(written) is type(shown):
        return True
    if _empty(written) and _empty(shown):
        return True
    # A quantity is a string or a number in a manifest (`cpu: 2`); the form writes the text.
    quantity = ".resources." in path and not isinstance(written, bool)
    return quantity and isinstance(written, int | float) and str(written) == shown


def _empty(value: Any) -> bool:
    return value is None or value == {} or value == []


CONTAINER_PATH = "spec.replicaSpecs[].template.spec.containers[]"
# The form field of each API field path, as the webhook's and the apiserver's errors name them
# (list indices written `[]`); a path not listed belongs to its nearest listed parent.
FIELD_OF_PATH = {
    "metadata.name": "name",
    "metadata.generateName": "name",
    "spec.torchrunConfig": "torchrun",
    "spec.torchrunConfig.enabled": "torchrun",
    "spec.torchrunConfig.enable": "torchrun",
    "spec.torchrunConfig.procPerNode": "proc_per_node",
    "spec.torchrunConfig.maxRestarts": "max_restarts",
    "spec.replicaSpecs[].replicas": "replicas",
    "spec.replicaSpecs[].restartPolicy": "restart_policy",
    f"{CONTAINER_PATH}.image": "image",
    f"{CONTAINER_PATH}.command": "command_line",
    f"{CONTAINER_PATH}.args": "command_line",
    f"{CONTAINER_PATH}.workingDir": "working_dir",
    f"{CONTAINER_PATH}.resources.requests.cpu": "cpu_request",
    f"{CONTAINER_PATH}.resources.requests.memory": "memory_request",
    f"{CONTAINER_PATH}.resources.limits.cpu": "cpu_limit",
    f"{CONTAINER_PATH}.resources.limits.memory": "memory_limit",
    f"{CONTAINER_PATH}.resources.limits[nvidia.com/gpu]": "gpus",
    # The webhook names the limits when procPerNode "gpu" finds no GPU limit in them.
    f"{CONTAINER_PATH}.resources.limits": "gpus",
    f"{CONTAINER_PATH}.volumeMounts": "pvc_mount_path",
    "spec.replicaSpecs[].template.spec.volumes": "pvc_claim",
    "spec.runPolicy.backoffLimit": "backoff_limit",
    "spec.runPolicy.activeDeadlineSeconds": "active_deadline_seconds",
    "spec.runPolicy.cleanUpPolicy": "clean_up_policy",
    "spec.tensorboardSpec": "tensorboard",
    "spec.tensorboardSpec.image": "tensorboard_image",
    "spec.tensorboardSpec.logDir": "tensorboard_log_path",
    "spec.scheduler": "queue",
    "spec.scheduler.t9kScheduler.queue": "queue",
    "spec.scheduler.t9kScheduler.priority": "priority",
}
INDEX = re.compile(r"\[[0-9]+\]")
# `limits.nvidia.com/gpu` (the apiserver's spelling of a key with dots) as `limits[nvidia.com/gpu]`
GPU_KEY = re.compile(r"\.nvidia\.com/gpu$")


def field_of_path(path: str, fields: dict[str, str] = FIELD_OF_PATH) -> str | None:
    """The form field an error about API field `path` is shown beside, or None (the error then
    goes above the form); `fields` maps the API's field paths to form fields."""
    general = GPU_KEY.sub("[nvidia.com/gpu]", INDEX.sub("[]", path.strip()))
    while general:
        if general in fields:
            return fields[general]
        general = _parent(general)
    return None


def _parent(path: str) -> str:
    if path.endswith("]"):
        return path[: path.rindex("[")]
    return path.rpartition(".")[0]
