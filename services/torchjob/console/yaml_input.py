"""YAML a user sends, read within bounds. An alias repeats a node wherever it stands, and aliases
of aliases double at each level: a kilobyte becomes billions of nodes, and the console's memory
with them (a "billion laughs"). A manifest needs neither anchors nor aliases, so a text that has
one is refused, as is one of more nodes, or nested deeper, than any job needs. Every bound is
checked on the parser's events, before a single node is built; the body's own size is bounded by
--max-body-bytes.

A refusal answers 400 with its reason (`refuse_unsafe_yaml`); a text that is simply no YAML
stays the editor's own problem, shown beside it (a `yaml.YAMLError`)."""

from __future__ import annotations

from typing import Any

import yaml
from aiohttp import web

from torchjob.console.security import Handler, refusal

# A job of a hundred replica types with a dozen containers each stays well below these.
MAX_NODES = 20_000
MAX_DEPTH = 50
LOADER = yaml.CSafeLoader if yaml.__with_libyaml__ else yaml.SafeLoader


class RefusedYaml(ValueError):
    """A YAML text the console will not read, and why."""


class UnreadableValue(yaml.YAMLError):
    """A scalar YAML reads as a value Python cannot hold (a date of month 13, an integer of
    more digits than Python converts)."""


def load(text: str) -> Any:
    """The one document of `text`, once its events keep every bound; `RefusedYaml` where they do
    not, a `yaml.YAMLError` where it is no YAML."""
    check_events(yaml.parse(text, Loader=LOADER))
    try:
        return yaml.load(text, Loader=LOADER)  # a safe loader: plain data only
    except ValueError as error:
        raise UnreadableValue(str(error)) from error


def check_events(events: Any) -> None:
    """Raise `RefusedYaml` at the first anchor or alias, or once the nodes grow too many or
    nest too deep."""
    nodes = depth = 0
    for event in events:
        if isinstance(event, yaml.AliasEvent):
            raise RefusedYaml(
                f"it holds an alias (*{event.anchor}): anchors and aliases are not accepted; "
                "write each value out"
            )
        if isinstance(event, yaml.NodeEvent) and event.anchor is not None:
            raise RefusedYaml(
                f"it holds an anchor (&{event.anchor}): anchors and aliases are not accepted; "
                "write each value out"
            )
        if isinstance(event, yaml.NodeEvent):
            nodes += 1
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1
        if nodes > MAX_NODES:
            raise RefusedYaml(f"it holds more than {MAX_NODES} values; a job needs far fewer")
        if depth > MAX_DEPTH:
            raise RefusedYaml(f"it nests deeper than {MAX_DEPTH} levels; a job needs far fewer")


@web.middleware
async def refuse_unsafe_yaml(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except RefusedYaml as refused:
        return refusal(request, 400, "Refused", f"The YAML was not read: {refused}")
