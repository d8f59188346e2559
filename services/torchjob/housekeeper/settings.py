"""Housekeeper settings: command-line flags, each with an environment variable as its default
(TORCHJOB_NAMESPACE, TORCHJOB_HOUSEKEEPER_LEASE, TORCHJOB_POD_NAME, TORCHJOB_HOUSEKEEPER_WORKERS,
TORCHJOB_MAX_CONNECTIONS, TORCHJOB_PROBE_HOST, TORCHJOB_PROBE_PORT, KUBECONFIG,
TORCHJOB_LOG_LEVEL)."""

from __future__ import annotations

from torchjob.runtime.service import Settings, parse_settings

DEFAULT_WORKERS = 2


def parse(argv: list[str] | None = None) -> Settings:
    return parse_settings(argv, "python -m torchjob.housekeeper", "housekeeper", DEFAULT_WORKERS)
