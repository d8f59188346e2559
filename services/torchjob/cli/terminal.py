"""What `torchjob run` shows: each replica's output prefixed with its name (stdout), torchjob's own
messages (stderr), and on a terminal a live one-line status kept below the output."""

from __future__ import annotations

import shutil
from typing import TextIO

COLOURS = ("36", "33", "35", "32", "34", "31")  # cyan, yellow, magenta, green, blue, red
CLEAR_LINE = "\r\x1b[K"


class Console:
    def __init__(self, out: TextIO, err: TextIO, *, live: bool | None = None) -> None:
        self.out = out
        self.err = err
        self.live = out.isatty() if live is None else live
        self.width = 0
        self.colours: dict[str, str] = {}
        self._status = ""
        self._shown = False

    def names(self, names: list[str]) -> None:
        """The replica names to come, so their prefixes line up."""
        self.width = max((len(n) for n in names), default=0)
        for position, name in enumerate(names):
            self.colours[name] = COLOURS[position % len(COLOURS)]

    def replica_line(self, name: str, text: str) -> None:
        prefix = f"{name:<{self.width}} |"
        if self.live:
            prefix = f"\x1b[{self.colours.get(name, '0')}m{prefix}\x1b[0m"
        self._write(self.out, f"{prefix} {text}\n")

    def say(self, text: str) -> None:
        self._write(self.err, f"torchjob: {text}\n")

    def status(self, text: str) -> None:
        """Replace the live status line (shown only on a terminal)."""
        self._status = text
        if self.live:
            self._hide()
            self._show()

    def close(self) -> None:
        if self.live:
            self._hide()
        self._status = ""

    def _write(self, stream: TextIO, text: str) -> None:
        if self.live:
            self._hide()
        stream.write(text)
        stream.flush()
        if self.live:
            self._show()

    def _hide(self) -> None:
        if self._shown:
            self.out.write(CLEAR_LINE)
            self.out.flush()
            self._shown = False

    def _show(self) -> None:
        if not self._status:
            return
        columns = shutil.get_terminal_size((100, 20)).columns
        self.out.write(f"\x1b[7m{self._status[: max(columns - 1, 10)]}\x1b[0m")
        self.out.flush()
        self._shown = True
