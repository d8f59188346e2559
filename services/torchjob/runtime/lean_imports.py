"""What each service's `__main__` imports first, before anything else of ours or of its
dependencies: the libraries the services use, without the parts they never run.

- kubernetes-asyncio a module at a time (`torchjob.kube.lazy_kubernetes`).
- structlog without rich: structlog's console renderer and traceback formatter import rich (and
  with it pygments) whenever it is installed, about 3 MB of every process's resident memory. The
  services render JSON (`runtime.logging`) and format exceptions as plain text, so rich is hidden
  while structlog is first imported, and only then: structlog falls back to its plain formatter,
  which the services do not use either. Imported after structlog, it changes nothing.
"""

from __future__ import annotations

import sys

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


_import_structlog_without_rich()
