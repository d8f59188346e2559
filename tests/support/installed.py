"""The services as the image runs them, for benches that compare their memory and CPU with
another project's: a virtual environment with the package and its dependencies installed as the
Dockerfile installs them (`pip install .`, no dev extras), and service processes started under
its interpreter. The dev .venv also holds the dev tools' dependencies, some of which the
services' own dependencies import when present (structlog imports `rich`, a dependency of
import-linter), which the image has not."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from support.controlplane import REPO_ROOT
from support.processes import SERVICE_PYTHON_VARIABLE


def install(directory: Path) -> Path:
    """A venv under `directory` with this tree's package installed; its interpreter."""
    venv = directory / "installed-venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            str(REPO_ROOT),
        ],
        check=True,
    )
    return python


def modules_loaded(python: Path, *modules: str) -> list[str]:
    """Which of `modules` importing the services' logging pulls in under `python`."""
    probe = (
        "import sys, torchjob.runtime.logging; "
        f"print(' '.join(m for m in {list(modules)!r} if m in sys.modules))"
    )
    printed = subprocess.run(
        [str(python), "-c", probe], check=True, capture_output=True, text=True, cwd="/"
    ).stdout
    return printed.split()


@contextlib.contextmanager
def services_run_by(python: Path | None) -> Iterator[None]:
    """Service processes made inside run under `python` (this interpreter when None)."""
    if python is None:
        yield
        return
    saved = os.environ.get(SERVICE_PYTHON_VARIABLE)
    os.environ[SERVICE_PYTHON_VARIABLE] = str(python)
    try:
        yield
    finally:
        if saved is None:
            del os.environ[SERVICE_PYTHON_VARIABLE]
        else:
            os.environ[SERVICE_PYTHON_VARIABLE] = saved


def print_interpreter(python: Path | None) -> None:
    where = "the dev .venv" if python is None else f"{python} (pip install . only)"
    loaded = modules_loaded(Path(sys.executable) if python is None else python, "rich")
    extras = ", ".join(loaded) if loaded else "none"
    print(f"services:   torchjob's run by {where}; dev packages its logging imports: {extras}")
