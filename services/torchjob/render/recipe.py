"""A job as people describe it: one `JobRecipe` that `torchjob submit`'s flags
(views/cli/submission.py) and the console's form (views/console/job_form.py) both fill in, and
`render_job`, the one function that makes a recipe the manifest of a job kind.

The recipe lives in render/, not api/: it is no API object. No apiserver stores or checks it and
it has no defaults or rules of its own; it is what a manifest is rendered from, as a replica is
what a pod is rendered from, and the manifest it renders is then admitted by its kind's own rules
(the webhook, `torchjob run`) like any other. In api/ it would be a second description of a job
beside the generated types. What every kind's manifest shares (the metadata, a replica's pod) is
rendered here; where it goes in the kind's spec, and the settings only some kinds have, each kind
renders itself (`JobKind.recipe_spec`) in its own module.

Values are as the user gave them: a count a form posts as `two` stays text (`Count`), for the
cluster to refuse by its own rule beside its field; None (or an empty tuple) is "not given", and
the kind's defaults apply. Pure."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from torchjob.api.job_api import JobApi
from torchjob.api.queries import TRAINING_CONTAINER_NAME

Manifest = dict[str, Any]
# A whole number, or the text the user wrote where one belongs (sent as written).
Count = int | str
Pairs = tuple[tuple[str, str], ...]
CODE_VOLUME = "code"
CODE_CONTAINER = "git-sync"


class NoPlace(ValueError):
    """Fields of a recipe a kind has no place for, each with why (a kind refuses them rather
    than dropping them); keyed by the recipe's field names."""

    def __init__(self, fields: dict[str, str]) -> None:
        super().__init__("; ".join(f"{name}: {message}" for name, message in fields.items()))
        self.fields = fields


@dataclass(frozen=True, slots=True)
class Volume:
    """A volume of every replica, mounted in the training container at `mount_path`: a
    PersistentVolumeClaim (`claim`), else an emptyDir (in memory where `memory`)."""

    name: str
    mount_path: str
    claim: str | None = None
    memory: bool = False


@dataclass(frozen=True, slots=True)
class GitCode:
    """Code cloned from git by an init container into `directory`, before training starts."""

    repository: str
    directory: str
    image: str
    branch: str | None = None


@dataclass(frozen=True, slots=True)
class Toleration:
    """A taint the replicas tolerate: `key` (every taint where None) with `value` (Exists where
    None) and `effect` (any where None)."""

    key: str | None = None
    value: str | None = None
    effect: str | None = None


@dataclass(frozen=True, slots=True)
class TensorBoard:
    """A TensorBoard beside the job, reading the training logs from T9k filesets
    (`t9k://pvc/<claim>/<path>`) or from a claim (`log_claim`, at `log_path` in it)."""

    image: str | None = None
    filesets: tuple[str, ...] = ()
    log_claim: str | None = None
    log_path: str | None = None


@dataclass(frozen=True, slots=True)
class JobRecipe:
    """What a job is made of, whatever API it is written in: its replicas (all running the same
    pod of one training container), how they start and restart, where they are placed."""

    name: str | None = None
    namespace: str | None = None
    labels: Pairs = ()
    # The replicas: how many (a kind with a master counts it among them) and their restarts.
    replicas: Count | None = None
    restart_policy: str | None = None
    # The training container.
    container: str = TRAINING_CONTAINER_NAME
    image: str | None = None
    image_pull_policy: str | None = None
    command: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    working_dir: str | None = None
    env: Pairs = ()
    requests: Pairs = ()
    limits: Pairs = ()
    volumes: tuple[Volume, ...] = ()
    code: GitCode | None = None
    # Placement.
    node_selector: Pairs = ()
    tolerations: tuple[Toleration, ...] = ()
    priority_class: str | None = None
    queue: str | None = None
    queue_priority: Count | None = None
    # torchrun (with it, `args` are torchrun's: the kind writes its command).
    torchrun: bool = False
    proc_per_node: str | None = None
    max_restarts: Count | None = None
    elastic_min: Count | None = None
    elastic_max: Count | None = None
    # The run policy.
    backoff_limit: Count | None = None
    active_deadline_seconds: Count | None = None
    clean_up_policy: str | None = None
    ttl_seconds_after_finished: Count | None = None
    tensorboard: TensorBoard | None = None


class RendersRecipes(Protocol):
    """What `render_job` asks of a job kind (render/job_kinds.py's `JobKind` meets it)."""

    api: JobApi

    def recipe_spec(self, recipe: JobRecipe) -> Manifest:
        """The spec of the job of this kind `recipe` describes; NoPlace for its fields this kind
        has no place for."""
        ...


def render_job(recipe: JobRecipe, kind: RendersRecipes) -> Manifest:
    """The manifest of the job `recipe` describes, written in `kind`'s API (not yet defaulted:
    only what the recipe gives)."""
    spec = kind.recipe_spec(recipe)
    api = kind.api
    return {
        "apiVersion": api.api_version,
        "kind": api.kind,
        "metadata": metadata(recipe),
        "spec": spec,
    }


def metadata(recipe: JobRecipe) -> Manifest:
    out: Manifest = {}
    put(out, "name", recipe.name)
    put(out, "namespace", recipe.namespace)
    put(out, "labels", dict(recipe.labels))
    return out


def put(into: Manifest, key: str, value: Any) -> None:
    """`value` at `key`, unless it is not given (None, or empty)."""
    if value not in (None, "", {}, [], ()):
        into[key] = value


def pod_template(recipe: JobRecipe, command: tuple[str, ...] = ()) -> Manifest:
    """Every replica's pod template; `command` is the training container's where the kind
    writes one (torchrun's), else the recipe's."""
    pod: Manifest = {"containers": [training_container(recipe, command or recipe.command)]}
    if recipe.code is not None:
        pod["initContainers"] = [_code_container(recipe.code)]
    put(pod, "volumes", [_volume(volume) for volume in _volumes(recipe)])
    put(pod, "nodeSelector", dict(recipe.node_selector))
    put(pod, "tolerations", [_toleration(toleration) for toleration in recipe.tolerations])
    put(pod, "priorityClassName", recipe.priority_class)
    return {"spec": pod}


def training_container(recipe: JobRecipe, command: tuple[str, ...]) -> Manifest:
    container: Manifest = {"name": recipe.container}
    put(container, "image", recipe.image)
    put(container, "imagePullPolicy", recipe.image_pull_policy)
    put(container, "command", list(command))
    put(container, "args", list(recipe.args))
    put(container, "workingDir", recipe.working_dir)
    put(container, "env", [{"name": name, "value": value} for name, value in recipe.env])
    resources: Manifest = {}
    put(resources, "requests", dict(recipe.requests))
    put(resources, "limits", dict(recipe.limits))
    put(container, "resources", resources)
    mounts = [{"name": v.name, "mountPath": v.mount_path} for v in _volumes(recipe)]
    put(container, "volumeMounts", mounts)
    return container


def _volumes(recipe: JobRecipe) -> tuple[Volume, ...]:
    """The recipe's volumes, and the one the code is cloned into last."""
    if recipe.code is None:
        return recipe.volumes
    return (*recipe.volumes, Volume(CODE_VOLUME, recipe.code.directory))


def _volume(volume: Volume) -> Manifest:
    if volume.claim is not None:
        return {"name": volume.name, "persistentVolumeClaim": {"claimName": volume.claim}}
    return {"name": volume.name, "emptyDir": {"medium": "Memory"} if volume.memory else {}}


def _code_container(code: GitCode) -> Manifest:
    clone = ["git", "clone", "--depth", "1"]
    if code.branch:
        clone += ["--branch", code.branch]
    return {
        "name": CODE_CONTAINER,
        "image": code.image,
        "command": [*clone, code.repository, code.directory],
        "volumeMounts": [{"name": CODE_VOLUME, "mountPath": code.directory}],
    }


def _toleration(toleration: Toleration) -> Manifest:
    out: Manifest = {}
    put(out, "key", toleration.key)
    if toleration.value is None:
        out["operator"] = "Exists"
    else:  # an empty value is a value too
        out.update(operator="Equal", value=toleration.value)
    put(out, "effect", toleration.effect)
    return out


def tensorboard_spec(tensorboard: TensorBoard) -> Manifest:
    """A TensorBoard's spec; an empty one still asks for a TensorBoard (the cluster names what it
    lacks)."""
    out: Manifest = {}
    put(out, "image", tensorboard.image)
    put(out, "trainingLogFilesets", list(tensorboard.filesets))
    if tensorboard.log_claim is not None:
        source: Manifest = {"name": tensorboard.log_claim}
        put(source, "subPath", [tensorboard.log_path] if tensorboard.log_path else [])
        out["logDir"] = {"pvc": [source]}
    return out or {"image": ""}
