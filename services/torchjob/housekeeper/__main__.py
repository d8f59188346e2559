"""`python -m torchjob.housekeeper`: leader-elected; only the leader watches and acts."""

from __future__ import annotations

from torchjob.housekeeper.controller import Housekeeper
from torchjob.housekeeper.settings import parse
from torchjob.render.job_kinds import opted_in_settings
from torchjob.runtime.service import run_controller_service


def main(argv: list[str] | None = None) -> None:
    settings = parse(argv)
    run_controller_service(
        "housekeeper",
        "housekeeper",
        settings,
        lambda api: Housekeeper(api, settings.identity, opted_in=opted_in_settings(settings)),
    )


if __name__ == "__main__":
    main()
