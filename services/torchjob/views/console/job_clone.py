"""A new job's manifest from an existing one (the console's Clone and Edit as YAML). Pure.

The clone is the job as its author wrote it: its kind and spec under a new name, without its
status and the metadata the cluster keeps (uid, resourceVersion, managed fields, owner...). The
stored spec holds the defaults the webhook filled in; a value the webhook would fill in again,
identically, is left out, so the form can show the clone wherever it showed the original."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Iterable
from typing import Any

Manifest = dict[str, Any]
# What fills in a kind's defaults: the defaulted copy of a job (and the patch that made it).
Defaulting = Callable[[Manifest], tuple[Manifest, Any]]

NUMBERED = re.compile(r"(.*)-([0-9]+)")


def clone_name(name: str) -> str:
    """The name suggested for a job's clone: `train` -> `train-2`, `train-2` -> `train-3`."""
    numbered = NUMBERED.fullmatch(name)
    if numbered:
        return f"{numbered[1]}-{int(numbered[2]) + 1}"
    return f"{name}-2"


def cloned(job: Manifest, default: Defaulting, keep: frozenset[str] = frozenset()) -> Manifest:
    """The manifest that creates a job like `job` (as read from the cluster) under a new name;
    `default` fills in the job's kind's defaults, as its webhook does, and the values of keys
    named in `keep` stay even where they are the defaults."""
    metadata = job.get("metadata")
    name = str(metadata.get("name") or "") if isinstance(metadata, dict) else ""
    spec = job.get("spec")
    clone: Manifest = {
        "apiVersion": job.get("apiVersion"),
        "kind": job.get("kind"),
        "metadata": {"name": clone_name(name)} if name else {},
    }
    if isinstance(spec, dict):
        clone["spec"] = _without_defaults(clone, copy.deepcopy(spec), default, keep)
    return clone


def _without_defaults(
    head: Manifest, spec: Manifest, default: Defaulting, keep: frozenset[str]
) -> Manifest:
    """`spec` less each value its defaulting puts back as it was, innermost first."""
    target = default({**head, "spec": copy.deepcopy(spec)})[0]["spec"]
    for path in reversed([path for path in _paths(spec, ()) if path[-1] not in keep]):
        candidate = copy.deepcopy(spec)
        del _at(candidate, path[:-1])[path[-1]]
        if default({**head, "spec": copy.deepcopy(candidate)})[0]["spec"] == target:
            spec = candidate
    return spec


def _paths(value: Any, path: tuple[Any, ...]) -> Any:
    """Every key's path in the mappings of `value` (lists' items by index), parents first."""
    items: Iterable[tuple[Any, Any]] = ()
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    for key, child in items:
        if isinstance(value, dict):
            yield (*path, key)
        yield from _paths(child, (*path, key))


def _at(value: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        value = value[key]
    return value
