"""Reconciler settings: those of every leader-elected service (runtime/settings.py), how jobs are
scheduled (gang scheduling, the T9k scheduler's queues), and the delay before a replica's first
restart."""

from __future__ import annotations

from dataclasses import dataclass, field

from torchjob.api import constants
from torchjob.lifecycle.backoff import (
    BASE_DELAY,
    GANG_RESTART_LIMIT,
    GANG_RESTART_WINDOW,
    MAX_DELAY,
    PROGRESS_DEADLINE,
    REPLICA_RESTARTS_BEFORE_GANG,
    RestartBackoff,
    RestartRules,
)
from torchjob.lifecycle.backoff import (
    START_DEADLINE as DEFAULT_START_DEADLINE,
)
from torchjob.lifecycle.nodes import DEFAULT_NODE_LOST_GRACE
from torchjob.render.scheduling import GANG_SETTINGS, SchedulingSettings
from torchjob.runtime import service
from torchjob.runtime.settings import (
    PREFIX,
    Setting,
    default_of,
    environment,
    leader_settings,
    parser_of,
    values_of,
)

DEFAULT_WORKERS = 4
SUCCESS_GRACE = 30.0  # --success-grace: the reconciler's, not the pure rules' default of 0
MAX_GANG_RESTART_TIMES = 64  # status.gangRestartTimes holds at most this many (the CRD's bound)


def _backoff_problem(seconds: float) -> str | None:
    return None if 0 <= seconds <= MAX_DELAY else f"must lie between 0 and {MAX_DELAY:.0f} seconds"


def _not_negative(value: float) -> str | None:
    return None if value >= 0 else "must be 0 or more"


def _gang_limit_problem(value: int) -> str | None:
    return None if 0 <= value <= MAX_GANG_RESTART_TIMES else "must lie between 0 and 64"


def _positive(value: float) -> str | None:
    return None if value > 0 else "must be more than 0"


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


# The pure layer's defaults (render/scheduling.py), which a job planned without settings gets too.
_SCHEDULING = SchedulingSettings()
SCHEDULING: tuple[Setting, ...] = (
    Setting(
        "--scheduler-name",
        f"{PREFIX}T9K_SCHEDULER_NAME",
        _SCHEDULING.t9k_scheduler,
        "the scheduler of jobs that ask for the T9k scheduler",
    ),
    Setting(
        "--gang-scheduling",
        f"{PREFIX}GANG_SCHEDULING",
        _SCHEDULING.gang,
        "how the pods of a job that does not choose are placed together: native "
        "(Kubernetes' PodGroup), volcano, coscheduling, none, or auto (native when the "
        "apiserver serves scheduling.k8s.io/v1beta1 PodGroups, else none)",
        choices=GANG_SETTINGS,
    ),
    Setting(
        "--volcano-scheduler-name",
        f"{PREFIX}VOLCANO_SCHEDULER_NAME",
        _SCHEDULING.volcano_scheduler,
        "schedulerName of pods in Volcano PodGroups",
    ),
    Setting(
        "--coscheduling-scheduler-name",
        f"{PREFIX}COSCHEDULING_SCHEDULER_NAME",
        _SCHEDULING.coscheduling_scheduler,
        "schedulerName of pods in scheduler-plugins' coscheduling PodGroups",
    ),
    Setting(
        "--t9k-queues",
        f"{PREFIX}T9K_QUEUES",
        _SCHEDULING.t9k_queues,
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
    f"long, at most {MAX_DELAY:.0f}s (0: restart at once), unless the job's "
    f"{constants.ANNOTATION_RESTART_BACKOFF} annotation says otherwise",
    check=_backoff_problem,
)

# How replicas are restarted together (lifecycle/gang.py) and when a silent job is restarted
# (lifecycle/no_progress.py).
RESTARTS: tuple[Setting, ...] = (
    Setting(
        "--replica-restarts-before-gang",
        f"{PREFIX}REPLICA_RESTARTS_BEFORE_GANG",
        REPLICA_RESTARTS_BEFORE_GANG,
        "in a job of the Replica restart scope, the restarts in a row of one replica after which "
        "its next restart restarts every replica together",
        check=_not_negative,
    ),
    Setting(
        "--gang-restart-limit",
        f"{PREFIX}GANG_RESTART_LIMIT",
        GANG_RESTART_LIMIT,
        "the most gang restarts (every replica restarted together, counted against "
        "backoffLimit) a job makes within --gang-restart-window; the next fails it with "
        "GangRestartLimitExceeded (0: no limit; at most 64, the times status keeps)",
        check=_gang_limit_problem,
    ),
    Setting(
        "--gang-restart-window",
        f"{PREFIX}GANG_RESTART_WINDOW",
        GANG_RESTART_WINDOW,
        "seconds within which --gang-restart-limit counts a job's gang restarts",
        check=_positive,
    ),
    Setting(
        "--progress-deadline",
        f"{PREFIX}PROGRESS_DEADLINE",
        PROGRESS_DEADLINE,
        "seconds a job that reports progress may go without a report while its pods run before "
        "every replica is restarted (or the job fails with NoProgress), unless the job's "
        f"{constants.ANNOTATION_PROGRESS_DEADLINE} annotation says otherwise (0: no deadline)",
        check=_not_negative,
    ),
)

START_DEADLINE = Setting(
    "--start-deadline",
    f"{PREFIX}START_DEADLINE",
    DEFAULT_START_DEADLINE,
    "seconds a replica's pod may be unable to start (an image that cannot be pulled, a missing "
    "Secret, no node that fits) before its job fails, unless the job's "
    f"{constants.ANNOTATION_START_DEADLINE} annotation says otherwise (0: never)",
    check=_not_negative,
)


NODE_LOST_GRACE = Setting(
    "--node-lost-grace",
    f"{PREFIX}NODE_LOST_GRACE",
    DEFAULT_NODE_LOST_GRACE,
    "seconds a node may be NotReady or unreachable before its pods are deleted and created "
    "again elsewhere, not counted as restarts (forcibly once the node is gone or unreachable)",
    check=_not_negative,
)


SUCCESS_GRACE_SETTING = Setting(
    "--success-grace",
    f"{PREFIX}SUCCESS_GRACE",
    SUCCESS_GRACE,
    "seconds the other replicas of a job that succeeded may take to finish on their own before "
    "they are stopped and the job is marked Succeeded (a worker about to exit 0 keeps its log)",
    check=_not_negative,
)


@dataclass(frozen=True, slots=True)
class Settings(service.Settings):
    scheduling: SchedulingSettings = field(default_factory=SchedulingSettings)
    restart_backoff: float = RESTART_BACKOFF.default
    start_deadline: int = START_DEADLINE.default
    node_lost_grace: float = NODE_LOST_GRACE.default
    success_grace: float = SUCCESS_GRACE_SETTING.default
    replica_restarts_before_gang: int = default_of(RESTARTS, "replica_restarts_before_gang")
    gang_restart_limit: int = default_of(RESTARTS, "gang_restart_limit")
    gang_restart_window: float = default_of(RESTARTS, "gang_restart_window")
    progress_deadline: int = default_of(RESTARTS, "progress_deadline")

    def restart_rules(self) -> RestartRules:
        """How the planner restarts replicas, as these settings say."""
        return RestartRules(
            backoff=RestartBackoff(base=self.restart_backoff),
            replica_restarts_before_gang=self.replica_restarts_before_gang,
            gang_restart_limit=self.gang_restart_limit,
            gang_restart_window=self.gang_restart_window,
            progress_deadline=self.progress_deadline,
            start_deadline=self.start_deadline,
            success_grace=self.success_grace,
        )


def declared() -> tuple[Setting, ...]:
    return (
        *leader_settings("reconciler", DEFAULT_WORKERS),
        *SCHEDULING,
        RESTART_BACKOFF,
        *RESTARTS,
        START_DEADLINE,
        NODE_LOST_GRACE,
        SUCCESS_GRACE_SETTING,
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
