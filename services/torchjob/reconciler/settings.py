"""Reconciler settings: the flags every leader-elected service takes, the scheduler name, and the
delay before a replica's first restart."""

from __future__ import annotations

from dataclasses import dataclass

from torchjob.api import constants
from torchjob.lifecycle.backoff import BASE_DELAY, MAX_DELAY
from torchjob.runtime import service
from torchjob.runtime.service import DEFAULT_BURST, DEFAULT_QPS, common_settings, settings_parser

__all__ = ["DEFAULT_BURST", "DEFAULT_QPS", "Settings", "parse"]

DEFAULT_WORKERS = 4


@dataclass(frozen=True, slots=True)
class Settings(service.Settings):
    scheduler_name: str = constants.T9K_SCHEDULER_NAME
    restart_backoff: float = BASE_DELAY


def parse(argv: list[str] | None = None) -> Settings:
    p = settings_parser("python -m torchjob.reconciler", "reconciler", DEFAULT_WORKERS)
    p.add_argument(
        "--scheduler-name",
        default=service.env("T9K_SCHEDULER_NAME", constants.T9K_SCHEDULER_NAME),
        help="the scheduler of jobs that ask for the T9k scheduler",
    )
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
        scheduler_name=parsed.scheduler_name,
        restart_backoff=parsed.restart_backoff,
    )
