"""The YAML a user sends, read within bounds: no anchors or aliases (the "billion laughs" that
grows a kilobyte into gigabytes), no more nodes or nesting than a job needs, and every manifest a
person writes still read as before."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from torchjob.console import yaml_input
from torchjob.console.create import draft_of_yaml
from torchjob.console.yaml_input import MAX_DEPTH, MAX_NODES, RefusedYaml, UnreadableValue

EXAMPLES = sorted((Path(__file__).parents[2] / "examples").rglob("*.yaml"))


def alias_bomb(levels: int = 9) -> str:
    """Each level nine aliases of the one before: 9**levels strings from about a kilobyte."""
    lines = ['l0: &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for level in range(1, levels):
        aliases = ",".join([f"*l{level - 1}"] * 9)
        lines.append(f"l{level}: &l{level} [{aliases}]")
    return "\n".join(lines) + "\n"


def test_the_alias_bomb_is_refused_before_anything_is_built() -> None:
    bomb = alias_bomb()
    assert len(bomb) < 1024
    with pytest.raises(RefusedYaml, match=r"anchor \(&l0\)"):
        yaml_input.load(bomb)


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("a: &x 1\nb: 2\n", r"anchor \(&x\)"),
        ("a: *x\n", r"alias \(\*x\)"),
        ("base: &b {image: x}\nworker: {<<: *b}\n", r"anchor \(&b\)"),
        ("- &s [1]\n", r"anchor \(&s\)"),
    ],
)
def test_anchors_and_aliases_are_refused(text: str, said: str) -> None:
    with pytest.raises(RefusedYaml, match=said):
        yaml_input.load(text)


def test_deep_nesting_is_refused() -> None:
    yaml_input.load("a: " + "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1))
    for deep in ("[" * (MAX_DEPTH + 1), "a: " + "{b: " * MAX_DEPTH + "1" + "}" * MAX_DEPTH):
        with pytest.raises(RefusedYaml, match="nests deeper"):
            yaml_input.load(deep)
    block = "".join(f"{'  ' * level}k:\n" for level in range(MAX_DEPTH + 1))
    with pytest.raises(RefusedYaml, match="nests deeper"):
        yaml_input.load(block)


def test_nesting_past_what_the_parser_holds_is_refused_not_recursed() -> None:
    """libyaml's scanner stops at its own depth first; either way nothing recurses."""
    with pytest.raises(yaml.YAMLError if yaml.__with_libyaml__ else RefusedYaml):
        yaml_input.load("[" * 100_000)


def test_too_many_nodes_are_refused() -> None:
    yaml_input.load("[" + ",".join(["1"] * (MAX_NODES - 1)) + "]")
    with pytest.raises(RefusedYaml, match=f"more than {MAX_NODES}"):
        yaml_input.load("[" + ",".join(["1"] * MAX_NODES) + "]")


def test_a_value_python_cannot_hold_is_a_yaml_problem() -> None:
    for text in ("created: 2001-13-45\n", f"n: {'1' * 5000}\n"):
        with pytest.raises(UnreadableValue):
            yaml_input.load(text)
        assert draft_of_yaml(text).yaml_problem


def test_what_is_no_yaml_stays_a_yaml_problem() -> None:
    with pytest.raises(yaml.YAMLError) as raised:
        yaml_input.load("a: [\n")
    assert not isinstance(raised.value, RefusedYaml)
    assert "while parsing" in draft_of_yaml("a: [\n").yaml_problem
    with pytest.raises(yaml.YAMLError):
        yaml_input.load("!!python/object/apply:os.system ['true']\n")


def test_every_example_reads_as_the_safe_loader_reads_it() -> None:
    assert EXAMPLES
    for path in EXAMPLES:
        text = path.read_text()
        for document in text.split("\n---\n"):
            assert yaml_input.load(document) == yaml.safe_load(document), path


def test_the_draft_of_a_bomb_is_refused() -> None:
    with pytest.raises(RefusedYaml):
        draft_of_yaml(alias_bomb())
