"""Reconciler settings: the flags every leader-elected service takes, how jobs are scheduled
(gang scheduling, the T9k scheduler's queues), and the delay before a replica's first restart."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

from torchjob.api import constants
from torchjob.lifecycle.backoff import BASE_DELAY, MAX_DELAY
from torchjob.render.scheduling import GANG_SETTINGS, SchedulingSettings
from torchjob.runtime import service
from torchjob.runtime.service import DEFAULT_BURST, DEFAULT_QPS, common_settings, settings_parser

__all__ = ["DEFAULT_BURST", "DEFAULT_QPS", "Settings", "parse"]

DEFAULT_WORKERS = 4


@dataclass(frozen=True, slots=True)
class Settings(service.Settings):
    scheduling: SchedulingSettings = field(default_factory=SchedulingSettings)
    restart_backoff: float = BASE_DELAY


def parse(argv: list[str] | None = None) -> Settings:
    p = settings_parser("python -m torchjob.reconciler", "reconciler", DEFAULT_WORKERS)
    p.add_argument(
        "--scheduler-name",
        default=service.env("T9K_SCHEDULER_NAME", constants.T9K_SCHEDULER_NAME),
        help="the scheduler of jobs that ask for the T9k scheduler",
    )
    _scheduling_flags(p)
    service.number(
        p,
        "--restart-backoff",
        "RESTART_BACKOFF",
        BASE_DELAY,
        "seconds before a replica's first restart in a row; each further one waits twice as "
        f"long, at most {MAX_DELAY:.0f}s (0: restart at once)",
    )
    parsed = p.parse_args(argv)
    if not 0 <= parsed.restart_backoff <= MAX_DELAY:
        p.error(f"--restart-backoff: must lie between 0 and {MAX_DELAY:.0f} seconds")
    return Settings(
        **common_settings(parsed),
        scheduling=SchedulingSettings(
            gang=parsed.gang_scheduling,
            volcano_scheduler=parsed.volcano_scheduler_name,
            coscheduling_scheduler=parsed.coscheduling_scheduler_name,
            t9k_queues=parsed.t9k_queues,
            t9k_priority_classes=_priority_classes(p, parsed.t9k_priority_classes),
            t9k_scheduler=parsed.scheduler_name,
        ),
        restart_backoff=parsed.restart_backoff,
    )


def _scheduling_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--gang-scheduling",
        choices=GANG_SETTINGS,
        default=service.env("GANG_SCHEDULING", "auto"),
        help="how the pods of a job that does not choose are placed together: native "
        "(Kubernetes' PodGroup), volcano, coscheduling, none, or auto (native when the "
        "apiserver serves scheduling.k8s.io/v1beta1 PodGroups, else none)",
    )
    p.add_argument(
        "--volcano-scheduler-name",
        default=service.env("VOLCANO_SCHEDULER_NAME", "volcano"),
        help="schedulerName of pods in Volcano PodGroups",
    )
    p.add_argument(
        "--coscheduling-scheduler-name",
        default=service.env("COSCHEDULING_SCHEDULER_NAME", "scheduler-plugins-scheduler"),
        help="schedulerName of pods in scheduler-plugins' coscheduling PodGroups",
    )
    p.add_argument(
        "--t9k-queues",
        choices=("t9k", "kueue"),
        default=service.env("T9K_QUEUES", "t9k"),
        help="spec.scheduler.t9kScheduler goes to the T9k scheduler (t9k), or names a Kueue "
        "LocalQueue (kueue)",
    )
    p.add_argument(
        "--t9k-priority-classes",
        default=service.env("T9K_PRIORITY_CLASSES", ""),
        help="with --t9k-queues=kueue, T9k priorities to priority classes: '0=low,50=normal,"
        "90=high' gives a job the class of the highest threshold at or below its priority",
    )


def _priority_classes(p: argparse.ArgumentParser, text: str) -> tuple[tuple[int, str], ...]:
    pairs = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        threshold, _, name = item.partition("=")
        if not threshold.strip().isdigit() or not name.strip():
            p.error(f"--t9k-priority-classes: {item!r} is not <priority>=<priority class>")
        pairs.append((int(threshold), name.strip()))
    return tuple(sorted(pairs))
