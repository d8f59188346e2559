"""Housekeeper settings: those of every leader-elected service (runtime/settings.py)."""

from __future__ import annotations

from torchjob.runtime.service import Settings
from torchjob.runtime.settings import Setting, environment, leader_settings, parser_of, values_of

DEFAULT_WORKERS = 2


def declared() -> tuple[Setting, ...]:
    return leader_settings("housekeeper", DEFAULT_WORKERS)


def parse(argv: list[str] | None = None) -> Settings:
    settings = declared()
    parser = parser_of(
        "python -m torchjob.housekeeper", "torchjob housekeeper", settings, environment()
    )
    return Settings(**values_of(parser, settings, argv, environment()))
