"""One client and one error hierarchy: the services and the `torchjob` CLI reach the apiserver
through kube/client.py, and kubernetes-asyncio is imported by kube/kubeconfig.py alone (its loader,
for a kubeconfig whose user runs an exec plugin or an auth provider). An import anywhere else (at
the top of a module or inside a function, by statement or by importlib) fails here."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

PACKAGE = Path(__file__).parents[2] / "services" / "torchjob"
LIBRARY = "kubernetes_asyncio"
# The modules allowed to import it, and why.
ALLOWED = {"kube/kubeconfig.py": "loads an exec-plugin or auth-provider kubeconfig"}
IMPORTERS = {"import_module", "__import__"}


def _is_library(module: str | None) -> bool:
    return module is not None and (module == LIBRARY or module.startswith(f"{LIBRARY}."))


def _imported_by_call(node: ast.Call) -> str | None:
    called = node.func
    name = called.attr if isinstance(called, ast.Attribute) else getattr(called, "id", None)
    if name in IMPORTERS and node.args and isinstance(node.args[0], ast.Constant):
        value = node.args[0].value
        return value if isinstance(value, str) else None
    return None


def library_imports(source: str) -> list[int]:
    """The lines of `source` that import kubernetes-asyncio (or a module of it)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            hit = any(_is_library(alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            hit = node.level == 0 and _is_library(node.module)
        elif isinstance(node, ast.Call):
            hit = _is_library(_imported_by_call(node))
        else:
            continue
        if hit:
            found.append(node.lineno)
    return sorted(found)


def test_every_way_of_importing_it_is_found() -> None:
    source = textwrap.dedent(
        """
        import kubernetes_asyncio
        import json, kubernetes_asyncio.client as k
        from kubernetes_asyncio.config import load_kube_config
        import importlib

        def later() -> None:
            from kubernetes_asyncio import client
            importlib.import_module("kubernetes_asyncio.watch")
            __import__("kubernetes_asyncio")

        import kubernetes_asyncio_lookalike
        from . import kubernetes_asyncio as ours
        importlib.import_module("json")
        """
    )
    assert library_imports(source) == [2, 3, 4, 8, 9, 10]


def test_only_the_kubeconfig_loader_imports_kubernetes_asyncio() -> None:
    importers = {
        path.relative_to(PACKAGE).as_posix()
        for path in sorted(PACKAGE.rglob("*.py"))
        if library_imports(path.read_text())
    }
    assert importers == set(ALLOWED)
