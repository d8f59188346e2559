"""`python -m torchjob.reconciler`: leader-elected; only the leader watches and acts."""

from __future__ import annotations

import dataclasses

from torchjob.kube.client import KubeClient
from torchjob.kube.discovery import served_gang_modes
from torchjob.reconciler import metrics
from torchjob.reconciler.controller import Reconciler
from torchjob.reconciler.settings import Settings, parse
from torchjob.runtime.service import run_controller_service


def main(argv: list[str] | None = None) -> None:
    settings = parse(argv)

    async def build(api: KubeClient) -> Reconciler:
        return await discovered(api, settings)

    run_controller_service("reconciler", "pytorchtrainingjob", settings, build, metrics.FAMILIES)


async def discovered(api: KubeClient, settings: Settings) -> Reconciler:
    """The reconciler, knowing which PodGroup kinds the apiserver serves."""
    served = await served_gang_modes(api)
    scheduling = dataclasses.replace(settings.scheduling, served=served)
    return Reconciler(api, dataclasses.replace(settings, scheduling=scheduling))


if __name__ == "__main__":
    main()
