"""`python -m torchjob.reconciler`: leader-elected; only the leader watches and acts."""

from __future__ import annotations

import torchjob.kube.lazy_kubernetes  # noqa: F401  (first: kubernetes-asyncio loaded as used)
from torchjob.reconciler import metrics
from torchjob.reconciler.controller import Reconciler
from torchjob.reconciler.settings import parse
from torchjob.runtime.service import run_controller_service


def main(argv: list[str] | None = None) -> None:
    settings = parse(argv)
    run_controller_service(
        "reconciler",
        "pytorchtrainingjob",
        settings,
        lambda api: Reconciler(api, settings),
        metrics.FAMILIES,
    )


if __name__ == "__main__":
    main()
