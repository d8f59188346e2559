"""An ArgumentParser that keeps what it was given in public attributes: its options (with those
of its parents) and its commands. The completion script and completion candidates are written
from the parser itself, so they never offer a flag the command lacks; argparse keeps this only
in private attributes, which may change in any Python release."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Option:
    strings: tuple[str, ...]  # e.g. ("-n", "--namespace")
    takes_value: bool
    choices: tuple[str, ...] = ()


class OptionGroup:
    """An argument group (or a mutually exclusive one) whose options its parser records."""

    def __init__(self, group: Any, record: Callable[[argparse.Action], None]) -> None:
        self.group = group
        self.record = record

    def add_argument(self, *args: Any, **kwargs: Any) -> argparse.Action:
        action: argparse.Action = self.group.add_argument(*args, **kwargs)
        self.record(action)
        return action


class CommandParser(argparse.ArgumentParser):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.options: list[Option] = []  # before argparse's own __init__ adds -h/--help
        self.commands: dict[str, CommandParser] = {}
        super().__init__(*args, **kwargs)
        parents: Sequence[argparse.ArgumentParser] = kwargs.get("parents", ())
        for parent in parents:
            if isinstance(parent, CommandParser):
                self.options += parent.options

    def record(self, action: argparse.Action) -> None:
        choices = tuple(str(c) for c in action.choices or ()) if action.option_strings else ()
        self.options.append(Option(tuple(action.option_strings), action.nargs != 0, choices))

    def add_argument(self, *args: Any, **kwargs: Any) -> argparse.Action:
        action = super().add_argument(*args, **kwargs)
        self.record(action)
        return action

    # Groups under names of their own: argparse's __init__ calls add_argument_group itself.
    def option_group(self, title: str) -> OptionGroup:
        return OptionGroup(self.add_argument_group(title), self.record)

    def exclusive_group(self) -> OptionGroup:
        return OptionGroup(self.add_mutually_exclusive_group(), self.record)

    def add_subparsers(self, **kwargs: Any) -> Any:
        action = super().add_subparsers(**kwargs)
        # The subcommands' parsers, by name: the live mapping argparse fills as add_parser is
        # called (an Action's documented `choices`), each one a CommandParser like this one.
        self.commands = action.choices
        return action

    def option(self, written: str) -> Option | None:
        return next((o for o in self.options if written in o.strings), None)
