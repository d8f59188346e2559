"""Reconciler settings: those of every leader-elected service (runtime/settings.py), how jobs are
scheduled (gang scheduling, the T9k scheduler's queues), and the delay before a replica's first
restart."""

from __future__ import annotations

from dataclasses import dataclass, field

from torchjob.api import constants
from torchjob.lifecycle.backoff import BASE_DELAY, MAX_DELAY
from torchjob.lifecycle.nodes import DEFAULT_NODE_LOST_GRACE
from torchjob.lifecycle.start_failure import DEFAULT_START_DEADLINE
from torchjob.render.scheduling import GANG_SETTINGS, SchedulingSettings
from torchjob.runtime import service
from torchjob.runtime.settings import (
    PREFIX,
    Setting,
    environment,
    leader_settings,
    parser_of,
    values_of,
)

DEFAULT_WORKERS = 4


@dataclass(frozen=True, slots=True)
class Settings(service.Settings):
    scheduling: SchedulingSettings = field(default_factory=SchedulingSettings)
    restart_backoff: float = BASE_DELAY
    start_deadline: int = DEFAULT_START_DEADLINE
    node_lost_grace: float = DEFAULT_NODE_LOST_GRACE


def _backoff_problem(seconds: float) -> str | None:
    return None if 0 <= seconds <= MAX_DELAY else f"must lie between 0 and {MAX_DELAY:.0f} seconds"


def _start_deadline_problem(seconds: int) -> str | None:
    return None if seconds >= 0 else "must be 0 or more seconds"


def _priority_classes_problem(text: str) -> str | None:
    try:
        priority_classes(text)
    except ValueError as error:
        return str(error)
    return None


def priority_classes(text: str) -> tuple[tuple[int, str], ...]:
    """'0=low,50=normal' as ((0, "low"), (50, "normal")), sorted by threshold."""
    pairs = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        threshold, _, name = item.partition("=")
        if not threshold.strip().isdigit() or not name.strip():
            raise ValueError(f"{item!r} is not <priority>=<priority class>")
        pairs.append((int(threshold), name.strip()))
    return tuple(sorted(pairs))


SCHEDULING: tuple[Setting, ...] = (
    Setting(
        "--scheduler-name",
        f"{PREFIX}T9K_SCHEDULER_NAME",
        constants.T9K_SCHEDULER_NAME,
        "the scheduler of jobs that ask for the T9k scheduler",
    ),
    Setting(
        "--gang-scheduling",
        f"{PREFIX}GANG_SCHEDULING",
        "auto",
        "how the pods of a job that does not choose are placed together: native "
        "(Kubernetes' PodGroup), volcano, coscheduling, none, or auto (native when the "
        "apiserver serves scheduling.k8s.io/v1beta1 PodGroups, else none)",
        choices=GANG_SETTINGS,
    ),
    Setting(
        "--volcano-scheduler-name",
        f"{PREFIX}VOLCANO_SCHEDULER_NAME",
        "volcano",
        "schedulerName of pods in Volcano PodGroups",
    ),
    Setting(
        "--coscheduling-scheduler-name",
        f"{PREFIX}COSCHEDULING_SCHEDULER_NAME",
        "scheduler-plugins-scheduler",
        "schedulerName of pods in scheduler-plugins' coscheduling PodGroups",
    ),
    Setting(
        "--t9k-queues",
        f"{PREFIX}T9K_QUEUES",
        "t9k",
        "spec.scheduler.t9kScheduler goes to the T9k scheduler (t9k), or names a Kueue "
        "LocalQueue (kueue)",
        choices=("t9k", "kueue"),
    ),
    Setting(
        "--t9k-priority-classes",
        f"{PREFIX}T9K_PRIORITY_CLASSES",
        "",
        "with --t9k-queues=kueue, T9k priorities to priority classes: '0=low,50=normal,"
        "90=high' gives a job the class of the highest threshold at or below its priority",
        check=_priority_classes_problem,
    ),
)

RESTART_BACKOFF = Setting(
    "--restart-backoff",
    f"{PREFIX}RESTART_BACKOFF",
    BASE_DELAY,
    "seconds before a replica's first restart in a row; each further one waits twice as "
    f"long, at most {MAX_DELAY:.0f}s (0: restart at once)",
    check=_backoff_problem,
)

START_DEADLINE = Setting(
    "--start-deadline",
    f"{PREFIX}START_DEADLINE",
    DEFAULT_START_DEADLINE,
    "seconds a replica's pod may be unable to start (an image that cannot be pulled, a missing "
    "Secret, no node that fits) before its job fails, unless the job's "
    f"{constants.ANNOTATION_START_DEADLINE} annotation says otherwise (0: never)",
    check=_start_deadline_problem,
)


def _grace_problem(seconds: float) -> str | None:
    return None if seconds >= 0 else "must not be negative"


NODE_LOST_GRACE = Setting(
    "--node-lost-grace",
    f"{PREFIX}NODE_LOST_GRACE",
    DEFAULT_NODE_LOST_GRACE,
    "seconds a node may be NotReady or unreachable before its pods are deleted and created "
    "again elsewhere, not counted as restarts (forcibly once the node is gone or unreachable)",
    check=_grace_problem,
)


def declared() -> tuple[Setting, ...]:
    return (
        *leader_settings("reconciler", DEFAULT_WORKERS),
        *SCHEDULING,
        RESTART_BACKOFF,
        START_DEADLINE,
        NODE_LOST_GRACE,
    )


def parse(argv: list[str] | None = None) -> Settings:
    settings = declared()
    parser = parser_of(
        "python -m torchjob.reconciler", "torchjob reconciler", settings, environment()
    )
    values = values_of(parser, settings, argv, environment())
    scheduling = SchedulingSettings(
        gang=values.pop("gang_scheduling"),
        volcano_scheduler=values.pop("volcano_scheduler_name"),
        coscheduling_scheduler=values.pop("coscheduling_scheduler_name"),
        t9k_queues=values.pop("t9k_queues"),
        t9k_priority_classes=priority_classes(values.pop("t9k_priority_classes")),
        t9k_scheduler=values.pop("scheduler_name"),
    )
    return Settings(**values, scheduling=scheduling)
