"""What each service's `__main__` imports first, before anything else of ours or of its
dependencies: the libraries the services use, without the parts they never run.

- kubernetes-asyncio a module at a time (`torchjob.kube.lazy_kubernetes`).
- structlog without rich: structlog's console renderer and traceback formatter import rich (and
  with it pygments) whenever it is installed, about 3 MB of every process's resident memory. The
  services render JSON (`runtime.logging`) and format exceptions as plain text, so rich is hidden
  while structlog is first imported, and only then: structlog falls back to its plain formatter,
  which the services do not use either. Imported after structlog, it changes nothing.
- Deferred until used: modules kubernetes-asyncio's client imports at once for what the services
  never call (`DEFERRED`). Each is put in `sys.modules` as its own module object, not yet run;
  reading any other attribute of it runs the module into that same object, so whoever imported
  it holds the real module from then on. The names imported from it (`from m import name`) are
  stand-ins that run it on their first call and then call the real one.
"""

from __future__ import annotations

import importlib.util
import sys
import types
from collections.abc import Callable
from typing import Any

import torchjob.kube.lazy_kubernetes  # noqa: F401  (kubernetes-asyncio loaded as used)

HIDDEN_WHILE_STRUCTLOG_LOADS = ("rich",)


def _import_structlog_without_rich() -> None:
    if "structlog" in sys.modules:
        return  # imported the usual way already
    # A None entry makes `import rich` raise ImportError, which structlog expects without it.
    hidden = [name for name in HIDDEN_WHILE_STRUCTLOG_LOADS if name not in sys.modules]
    for name in hidden:
        sys.modules[name] = None  # type: ignore[assignment]
    try:
        import structlog  # noqa: F401
    finally:
        for name in hidden:
            if sys.modules.get(name, ...) is None:
                del sys.modules[name]


# Each module, and the names imported from it by name. Together about 4 MB of each process.
DEFERRED: dict[str, tuple[str, ...]] = {
    # `client.configuration`, for basic-auth headers: the services authenticate by token or
    # certificate.
    "urllib3": (),
    # `client.api_client`, to decode the date-times of model classes: the services read and
    # write JSON (`kube.rest`).
    "dateutil.parser": ("parse",),
    # `client.api_client`, for calls in threads (`async_req`): the services' calls are awaited.
    "multiprocessing.pool": ("ThreadPool",),
}


def _defer(name: str, imported_names: tuple[str, ...]) -> None:
    if name in sys.modules:
        return  # imported the usual way already
    spec = importlib.util.find_spec(name)  # imports the parent package, if any
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    loaded = False

    def load() -> types.ModuleType:
        nonlocal loaded
        if not loaded:
            loaded = True
            # Out of the way first: a miss after loading is the module's own to answer.
            del module.__dict__["__getattr__"]
            spec.loader.exec_module(module)  # type: ignore[union-attr]
        return module

    def __getattr__(attribute: str) -> Any:
        if attribute == "__path__":
            # Asked of every module by `from m import name`: a package has one already, set
            # from its spec, and a plain module has none.
            raise AttributeError(attribute)
        return getattr(load(), attribute)  # `__version__` or `__all__` too: the module answers

    def stand_in(attribute: str) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            return getattr(load(), attribute)(*args, **kwargs)

        return call

    module.__getattr__ = __getattr__  # type: ignore[method-assign]
    for attribute in imported_names:
        setattr(module, attribute, stand_in(attribute))
    sys.modules[name] = module
    parent, _, child = name.rpartition(".")
    if parent:
        setattr(sys.modules[parent], child, module)


_import_structlog_without_rich()
for _name, _imported_names in DEFERRED.items():
    _defer(_name, _imported_names)
