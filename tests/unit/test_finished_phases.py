"""Which phases of a job (and of a pod) are final is written once: `api/constants.py` for a job,
`api/objects.py` for a pod, `lifecycle/status.py` for the conditions that end a
PyTorchTrainingJob and `render/kubeflow.py` for those that end a PyTorchJob. Every other module
reads those; a second literal list of them anywhere in the services fails here."""

from __future__ import annotations

import ast
from pathlib import Path

from torchjob.api.constants import FINISHED_JOB_PHASES
from torchjob.api.objects import FINISHED_POD_PHASES
from torchjob.api.types import CONDITION_TYPE_VALUES, JOB_PHASE_VALUES
from torchjob.lifecycle.status import TERMINAL_CONDITIONS
from torchjob.render.kubeflow import FINISHED_CONDITIONS, KUBEFLOW_CONDITIONS

PACKAGE = Path(__file__).parents[2] / "services" / "torchjob"
FINAL_SETS = (frozenset({"Succeeded", "Failed"}), frozenset({"Completed", "Failed"}))
HOMES = {"api/constants.py", "api/objects.py", "lifecycle/status.py"}


def final_lists_in(source: str) -> list[int]:
    """The lines of `source` holding a literal tuple, list or set of exactly the final phases
    (or conditions) of a job or a pod."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Tuple | ast.List | ast.Set):
            words = {e.value for e in node.elts if isinstance(e, ast.Constant)}
            if len(words) == len(node.elts) and frozenset(words) in FINAL_SETS:
                lines.append(node.lineno)
    return lines


def test_the_finder_finds_a_second_list() -> None:
    source = 'DONE = ("Succeeded", "Failed")\nx = phase in {"Failed", "Completed"}\n'
    assert final_lists_in(source) == [1, 2]
    assert final_lists_in('x = ("Running", "Succeeded", "Failed")\n') == []


def test_no_module_writes_the_final_phases_again() -> None:
    found = {
        f"{relative}:{line}"
        for path in PACKAGE.rglob("*.py")
        if (relative := path.relative_to(PACKAGE).as_posix()) not in HOMES
        for line in final_lists_in(path.read_text())
    }
    assert found == set()


def test_the_homes_name_phases_and_conditions_that_exist() -> None:
    assert set(FINISHED_JOB_PHASES) <= set(JOB_PHASE_VALUES)
    assert set(FINISHED_POD_PHASES) == {"Succeeded", "Failed"}
    assert set(TERMINAL_CONDITIONS) <= set(CONDITION_TYPE_VALUES)
    assert set(FINISHED_CONDITIONS) <= {c.type for c in KUBEFLOW_CONDITIONS}
