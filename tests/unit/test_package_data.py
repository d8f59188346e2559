"""Every file the console serves or renders ships in the wheel and the image: the package-data
patterns of pyproject.toml cover every file under console/templates and console/static."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).parents[2]
PACKAGE = ROOT / "services" / "torchjob"


def test_the_package_data_patterns_cover_every_template_and_static_file() -> None:
    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"
    ]["torchjob"]
    shipped = {path for pattern in patterns for path in PACKAGE.glob(pattern) if path.is_file()}
    served = {
        path
        for folder in ("console/templates", "console/static")
        for path in (PACKAGE / folder).rglob("*")
        if path.is_file()
    }
    assert served and served <= shipped, sorted(str(p) for p in served - shipped)
