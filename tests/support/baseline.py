"""An earlier revision of the services, for the benches' `--baseline REV`: the `services` tree of
REV taken out of this repository with `git archive` and run by the same interpreter, the same
.venv and the same flags as the current tree, that tree first on PYTHONPATH. A bench measures both
in one run on one machine and prints each figure with its ratio, current over baseline."""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[2]


def add_baseline_option(parser: argparse.ArgumentParser, what: str) -> None:
    """`--baseline REV` (`make bench BASELINE=REV` passes it to each bench that takes it)."""
    parser.add_argument(
        "--baseline",
        metavar="REV",
        help=f"also measure {what} of this git revision, in the same run, and print the ratios",
    )


def describe(revision: str) -> str:
    """`revision` as an abbreviated commit and its subject."""
    commit, _, subject = git("log", "-1", "--format=%h %s", revision).strip().partition(" ")
    return f"{commit} ({subject[:60]}...)" if len(subject) > 60 else f"{commit} ({subject})"


def current_tree() -> str:
    """HEAD as an abbreviated commit, and whether the working tree differs from it."""
    head = git("rev-parse", "--short", "HEAD").strip()
    changed = git("status", "--porcelain", "--untracked-files=no", "--", "services").strip()
    return f"{head} plus uncommitted changes to services/" if changed else head


def extract_services(revision: str, directory: Path) -> Path:
    """The `services` tree of `revision`, extracted under `directory`, checked to be the package
    a process with it first on PYTHONPATH imports."""
    archive = subprocess.run(
        ["git", "-C", str(REPOSITORY), "archive", revision, "services"],
        check=True,
        capture_output=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(directory)], input=archive, check=True)
    sources = directory / "services"
    imported = subprocess.run(
        [sys.executable, "-c", "import torchjob; print(torchjob.__file__)"],
        env={**os.environ, "PYTHONPATH": str(sources)},
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    if not Path(imported).is_relative_to(sources):
        raise RuntimeError(f"with PYTHONPATH={sources}, torchjob is imported from {imported}")
    return sources


@contextlib.contextmanager
def services_from(sources: Path | None) -> Iterator[None]:
    """Service processes made inside run the package in `sources` (the current tree when None):
    a ServiceProcess takes this process's environment when it is made, as the e2e helpers that
    start the services from the chart's arguments make it."""
    if sources is None:
        yield
        return
    saved = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = str(sources)
    try:
        yield
    finally:
        if saved is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = saved


def git(*args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(REPOSITORY), *args], check=True, capture_output=True, text=True
    ).stdout


@dataclass(frozen=True)
class Compared:
    """One figure of both runs, in `unit`."""

    name: str
    unit: str
    current: float
    baseline: float

    @property
    def ratio(self) -> float:
        if self.baseline == 0 or math.isnan(self.baseline):
            return math.nan
        return self.current / self.baseline


def print_comparison(revision: str, figures: list[Compared]) -> None:
    """The figures side by side, each with current / baseline."""
    row = "{:<52} {:>9} {:>9} {:>9}"
    print()
    print(f"current:    {current_tree()}")
    print(f"baseline:   {describe(revision)}")
    print(row.format("figure", "current", "baseline", "cur/base"))
    for figure in figures:
        cells = (f"{figure.current:.1f}", f"{figure.baseline:.1f}", f"{figure.ratio:.2f}")
        print(row.format(f"{figure.name}, {figure.unit}", *cells), flush=True)
