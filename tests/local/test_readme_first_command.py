"""The README's first command as a new user meets it: a clone of the committed tree, the command
run there with a `.venv` of its own (only the wheel cache under ~/.cache/torchjob is shared with
this checkout), and the test accuracy it prints read and checked."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
# What this test runs; it must stay the README's first command.
FIRST_COMMAND = "make demo"
ACCURACY = re.compile(r"^test accuracy: (?P<accuracy>[01]\.\d+)$", re.MULTILINE)
# The variables of an enclosing `make test` or venv that a new user's shell does not have.
OUTER_VARIABLES = ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEFILES", "VIRTUAL_ENV", "PYTHONPATH")


def readme_commands() -> list[str]:
    """The commands of the README's first code block, without their comments."""
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"```bash\n(?P<body>.*?)```", readme, re.DOTALL)
    assert block, "the README has no bash block"
    lines = (line.split("#", 1)[0].strip() for line in block["body"].splitlines())
    return [line for line in lines if line]


def new_users_environment() -> dict[str, str]:
    environment = {k: v for k, v in os.environ.items() if k not in OUTER_VARIABLES}
    paths = environment.get("PATH", "").split(os.pathsep)
    environment["PATH"] = os.pathsep.join(p for p in paths if not p.startswith(str(ROOT)))
    return environment


@pytest.mark.timeout(2400)
def test_the_readme_first_command_trains_the_example_in_a_fresh_clone(tmp_path: Path) -> None:
    assert readme_commands()[0] == FIRST_COMMAND, "the README's first command changed"
    clone = tmp_path / "torchjob"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True)
    assert not (clone / ".venv").exists()
    try:
        finished = subprocess.run(
            shlex.split(FIRST_COMMAND),
            cwd=clone,
            env=new_users_environment(),
            capture_output=True,
            text=True,
            timeout=2300,
        )
        said = finished.stdout + finished.stderr
        assert finished.returncode == 0, said[-4000:]
        printed = ACCURACY.search(finished.stdout)
        assert printed, said[-4000:]
        assert float(printed["accuracy"]) >= 0.95
        assert (clone / ".venv" / "bin" / "torchjob").exists()
    finally:
        shutil.rmtree(clone, ignore_errors=True)  # its .venv holds torch: gigabytes


def test_make_help_begins_with_the_readme_commands() -> None:
    helped = subprocess.run(
        ["make", "--no-print-directory", "help"],
        cwd=ROOT,
        env=new_users_environment(),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"```bash\n(?P<body>.*?)```", readme, re.DOTALL)
    assert block
    commands = block["body"].splitlines()
    assert helped[: len(commands)] == commands
    assert [line.split("#")[0].strip() for line in commands] == readme_commands()
    assert readme_commands() == [FIRST_COMMAND, "make test"]
