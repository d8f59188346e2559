"""Reconciler settings: the flags every leader-elected service takes, and the scheduler name."""

from __future__ import annotations

from dataclasses import dataclass

from torchjob.runtime import service
from torchjob.runtime.service import DEFAULT_BURST, DEFAULT_QPS, common_settings, settings_parser

__all__ = ["DEFAULT_BURST", "DEFAULT_QPS", "Settings", "parse"]

DEFAULT_WORKERS = 4


@dataclass(frozen=True, slots=True)
class Settings(service.Settings):
    scheduler_name: str = "t9k-scheduler"


def parse(argv: list[str] | None = None) -> Settings:
    p = settings_parser("python -m torchjob.reconciler", "reconciler", DEFAULT_WORKERS)
    p.add_argument(
        "--scheduler-name",
        default=service.env("T9K_SCHEDULER_NAME", "t9k-scheduler"),
        help="the scheduler of jobs that ask for the T9k scheduler",
    )
    parsed = p.parse_args(argv)
    return Settings(**common_settings(parsed), scheduler_name=parsed.scheduler_name)
