"""The tests share code only through tests/support: no test module imports another, none
reads a private name of the services (a test goes through the public seam a caller uses), and
none builds a PodView by hand (support.planning.replica_pod does, so a new field of it changes
one place)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from support.tools import load_tool

TESTS = Path(__file__).parents[1]
SERVICES = TESTS.parent / "services"
# The folders of tests/ a module could be imported from, and the pytest files by name.
TEST_PACKAGES = {"tests", "conftest", *(p.name for p in TESTS.iterdir() if p.is_dir())} - {
    "support"
}


@pytest.fixture(scope="module")
def rules() -> ModuleType:
    return load_tool("code_rules")


def modules_of_tests() -> list[Path]:
    return sorted(TESTS.rglob("*.py"))


def imports_of_tests(tree: ast.Module, in_support: bool) -> Iterator[str]:
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level and not in_support:
            yield f"from {'.' * node.level}{node.module or ''} import ..."
        modules = (
            [node.module or ""]
            if isinstance(node, ast.ImportFrom) and not node.level
            else [alias.name for alias in node.names]
            if isinstance(node, ast.Import)
            else []
        )
        for module in modules:
            top = module.split(".")[0]
            if top in TEST_PACKAGES or top.startswith("test_"):
                yield f"imports {module}"


def private_names_of_ours(tree: ast.Module, ours: set[str], own: set[str]) -> Iterator[str]:
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("torchjob"):
            for name in [*(node.module or "").split("."), *(a.name for a in node.names)]:
                if name in ours or (name.startswith("_") and not name.startswith("__")):
                    yield f"imports {name} from {node.module}"
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.ctx, ast.Load)
            and node.attr in ours
            and node.attr not in own
        ):
            yield f"reads {node.attr}"


def test_no_test_module_imports_another() -> None:
    found = []
    for path in modules_of_tests():
        tree = ast.parse(path.read_text(), str(path))
        in_support = path.parent.name == "support"
        found += [
            f"{path.relative_to(TESTS)}: {what}" for what in imports_of_tests(tree, in_support)
        ]
    assert found == [], "shared test code goes in tests/support"


def test_no_test_reads_a_private_name_of_the_services(rules: ModuleType) -> None:
    ours = rules.names_we_define(ast.parse(p.read_text()) for p in SERVICES.rglob("*.py"))
    found = []
    for path in modules_of_tests():
        tree = ast.parse(path.read_text(), str(path))
        own = rules.names_we_define([tree])  # a test's own helpers keep their private names
        found += [
            f"{path.relative_to(TESTS)}: {what}" for what in private_names_of_ours(tree, ours, own)
        ]
    assert found == [], "test through the public function, or make the seam public"


def pod_views_built(tree: ast.Module) -> Iterator[str]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            if name == "PodView":
                yield f"line {node.lineno}: PodView(...)"


def test_no_test_builds_a_pod_view_by_hand() -> None:
    found = []
    for path in modules_of_tests():
        if path.parent.name == "support":
            continue
        tree = ast.parse(path.read_text(), str(path))
        found += [f"{path.relative_to(TESTS)}: {what}" for what in pod_views_built(tree)]
    assert found == [], "build a test's pods with support.planning.replica_pod"


def test_both_checks_find_what_they_exist_for(rules: ModuleType) -> None:
    tree = ast.parse(
        "from .test_job_form import FORMS\nimport bench.reconcile\n"
        "from torchjob.kube.informer import _Hidden\nx = decoded._parsed\n"
    )
    assert list(imports_of_tests(tree, in_support=False)) == [
        "from .test_job_form import ...",
        "imports bench.reconcile",
    ]
    assert list(private_names_of_ours(tree, {"_parsed"}, set())) == [
        "imports _Hidden from torchjob.kube.informer",
        "reads _parsed",
    ]
    built = ast.parse("a = PodView('j', 'u')\nb = observe.PodView()\nc = replica_pod('w', 0)\n")
    assert list(pod_views_built(built)) == ["line 1: PodView(...)", "line 2: PodView(...)"]
