"""The job form's one command line, as the training container's command and args. Pure.

A data scientist writes what they would type in a terminal (`python train.py --epochs 30`). With
torchrun off the line is the container's command (its first word) and args (the rest). With
torchrun on the container's command is torchrun's (the webhook writes it) and the line becomes
torchrun's arguments, as torchrun takes them:

- `python train.py --epochs 30` -> `train.py --epochs 30` (torchrun starts the script with Python);
- `python -m pkg.train --epochs 30` -> `-m pkg.train --epochs 30` (torchrun's `--module`);
- `train.py --epochs 30` -> as written (a script torchrun starts with Python);
- anything else (`bash run.sh`, `python -u train.py`) -> `--no-python bash run.sh`: torchrun
  starts the command itself, with the same environment.

Reading a manifest back gives the line that makes the same args again (`python train.py ...` for
`train.py ...`), so the form and the YAML view agree on what runs."""

from __future__ import annotations

import re

PYTHON = re.compile(r"(?:.*/)?python[0-9.]*")
MODULE = "-m"
NO_PYTHON = "--no-python"
SCRIPT_SUFFIX = ".py"


def torchrun_args(words: list[str]) -> list[str]:
    """torchrun's arguments that run the command line `words` on every process."""
    if not words:
        return []
    first, rest = words[0], words[1:]
    if PYTHON.fullmatch(first):
        if rest and not rest[0].startswith("-"):
            return rest
        if len(rest) > 1 and rest[0] == MODULE and not rest[1].startswith("-"):
            return rest
    elif first.endswith(SCRIPT_SUFFIX) and not first.startswith("-"):
        return words
    return [NO_PYTHON, *words]


def line_of_torchrun_args(args: list[str]) -> list[str]:
    """The command line torchrun's arguments `args` run (`python` before a script or module)."""
    if not args:
        return []
    if args[0] == NO_PYTHON:
        return args[1:]
    return ["python", *args]


def container_command(words: list[str], torchrun: bool) -> tuple[list[str], list[str]]:
    """The container's command and args for the command line `words`: with torchrun, no command
    (the webhook writes torchrun's) and torchrun's arguments."""
    if torchrun:
        return [], torchrun_args(words)
    return words[:1], words[1:]


def line_of_container(command: list[str], args: list[str], torchrun: bool) -> list[str]:
    """The command line of a container's command and args (the inverse of container_command
    where there is one; a manifest it does not invert is left to the YAML view)."""
    if torchrun and not command:
        return line_of_torchrun_args(args)
    return [*command, *args]
