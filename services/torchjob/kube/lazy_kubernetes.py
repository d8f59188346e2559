"""kubernetes-asyncio, loaded a module at a time: importing this before anything imports
kubernetes_asyncio makes `kubernetes_asyncio`, `kubernetes_asyncio.client` and
`kubernetes_asyncio.client.models` lazy packages, whose names are imported from their defining
module on first use. Each service imports it first (its `__main__`).

The package's own `__init__` imports every API class and all of the ~800 model classes, and
`client.api_client` imports the models package whatever a program uses: about 30 MB of every
service's resident memory and a third of a second of its start-up. The services use a handful of
API classes and, through the client's deserializer, the model classes of the replies they decode.
`client.api`'s `__init__` imports all of the 66 API classes as soon as one of them is used: about
13 MB, against 5 MB for the six the services use (CoreV1Api alone is 2.3 MB).
`kubernetes_asyncio.config` imports its kubeconfig loader (and with it PyYAML) even for the
in-cluster configuration, which is all a service in its pod reads: about 1 MB.

Each lazy package resolves a name the way its `__init__` would have: the names its `__init__`
imports `from` a submodule, and the dunder strings it sets (`__version__`), are read from the
file (without running it); any other name is tried as a submodule, and failing that the
`__init__` is run after all (once), for what it defines itself (`config.load_config`). Imported
after kubernetes_asyncio was loaded the usual way, it changes nothing.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import sys
import types
from pathlib import Path
from typing import Any

LAZY_PACKAGES = (
    "kubernetes_asyncio",
    "kubernetes_asyncio.client",
    "kubernetes_asyncio.client.api",
    "kubernetes_asyncio.client.models",
    "kubernetes_asyncio.config",
)
# `from kubernetes_asyncio.client.api.core_v1_api import CoreV1Api`, one to a line.
IMPORTED_NAME = re.compile(r"^from ([\w.]+) import (\w+)$", re.MULTILINE)
# `from kubernetes_asyncio.config.kube_config import (` with a name to each line up to `)`.
IMPORTED_NAMES = re.compile(r"^from ([\w.]+) import \(\n((?:\s+\w+,?\n)+)\)$", re.MULTILINE)
# `__version__ = "36.1.0"`: the dunder strings an `__init__` sets, which submodules import.
DUNDER_STRING = re.compile(r"""^(__\w+__) = ["']([^"']*)["']$""", re.MULTILINE)


def _lazy_package(name: str) -> types.ModuleType | None:
    """The package `name` with its `__init__` read, not run; None when it is not installed."""
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None or spec.submodule_search_locations is None:
        return None
    init = Path(spec.origin)
    source_text = init.read_text()
    sources = {imported: module for module, imported in IMPORTED_NAME.findall(source_text)}
    for module, names in IMPORTED_NAMES.findall(source_text):
        sources.update((imported.strip(" ,"), module) for imported in names.split())
    package = types.ModuleType(name, f"kubernetes-asyncio's {name}, loaded as it is used")
    for dunder, value in DUNDER_STRING.findall(source_text):
        setattr(package, dunder, value)
    package.__path__ = list(spec.submodule_search_locations)
    package.__file__ = str(init)
    package.__spec__ = spec
    package.__package__ = name

    def __getattr__(attribute: str) -> Any:
        source = sources.get(attribute)
        if source is None:
            if attribute.startswith("__") and attribute != "__all__":
                raise AttributeError(attribute)
            try:
                value: Any = importlib.import_module(f"{name}.{attribute}")
            except ModuleNotFoundError as error:
                value = _defined_by_init(attribute, error)
        else:
            value = getattr(importlib.import_module(source), attribute)
        setattr(package, attribute, value)  # resolved once; later reads are plain attributes
        return value

    init_ran = False

    def _defined_by_init(attribute: str, error: ModuleNotFoundError) -> Any:
        """A name the `__init__` defines itself: the `__init__` is run in the package, once."""
        nonlocal init_ran
        if not init_ran:
            init_ran = True
            exec(compile(source_text, str(init), "exec"), package.__dict__)
        if attribute in package.__dict__:
            return package.__dict__[attribute]
        raise AttributeError(f"module {name!r} has no attribute {attribute!r}") from error

    package.__getattr__ = __getattr__  # type: ignore[method-assign]
    return package


def _install() -> None:
    if any(name in sys.modules for name in LAZY_PACKAGES):
        return  # loaded the usual way already
    parent: types.ModuleType | None = None
    for name in LAZY_PACKAGES:
        package = _lazy_package(name)
        if package is None:
            return
        sys.modules[name] = package
        if parent is not None:
            setattr(parent, name.rpartition(".")[2], package)
        parent = package


_install()
