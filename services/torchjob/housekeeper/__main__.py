"""`python -m torchjob.housekeeper`: leader-elected; only the leader watches and acts."""

from __future__ import annotations

from torchjob.housekeeper.controller import Housekeeper
from torchjob.housekeeper.settings import parse
from torchjob.runtime.service import run_controller_service


def main(argv: list[str] | None = None) -> None:
    settings = parse(argv)
    run_controller_service(
        "housekeeper",
        "housekeeper",
        settings,
        lambda api: Housekeeper(api, settings.identity, kubeflow=settings.kubeflow),
    )


if __name__ == "__main__":
    main()
