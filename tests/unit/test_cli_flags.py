"""The cluster flags (-n, -A, --context, --kubeconfig) are taken before the verb as kubectl takes
them, as well as after it; a flag the verb does not take is refused, naming it."""

from __future__ import annotations

import subprocess

import pytest

from torchjob.cli.completion import bash_script, candidates
from torchjob.cli.main import main, parser


@pytest.mark.parametrize(
    ("argv", "namespace"),
    [
        (["-n", "team-a", "get", "mnist"], "team-a"),
        (["--namespace=team-a", "get", "mnist"], "team-a"),
        (["get", "mnist", "-n", "team-b"], "team-b"),
        (["-n", "team-a", "get", "mnist", "-n", "team-b"], "team-b"),  # the last one wins
        (["get", "mnist"], None),
        (["-n", "team-a", "run", "job.yaml"], "team-a"),
    ],
)
def test_the_namespace_before_or_after_the_verb(argv: list[str], namespace: str | None) -> None:
    assert parser().parse_args(argv).namespace == namespace


def test_every_cluster_flag_before_the_verb() -> None:
    args = parser().parse_args(
        ["--kubeconfig", "kc", "--context", "prod", "-A", "list", "-o", "name"]
    )
    assert (args.kubeconfig, args.context, args.all_namespaces) == ("kc", "prod", True)
    nested = parser().parse_args(["--context", "prod", "top", "node"])
    assert nested.context == "prod" and nested.what == "node"


@pytest.mark.parametrize(
    ("argv", "refused"),
    [
        (["-A", "get", "mnist"], "-A/--all-namespaces: `get` does not take it"),
        (["--context", "prod", "run", "job.yaml"], "--context: `run` does not take it"),
        (["-n", "team-a", "convert", "job.yaml"], "-n/--namespace: `convert` does not take it"),
    ],
)
def test_a_flag_the_verb_does_not_take_is_refused(
    argv: list[str], refused: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    assert refused in capsys.readouterr().err


def test_help_shows_each_cluster_flag_once(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["--help"], ["get", "--help"], ["list", "--help"]):
        with pytest.raises(SystemExit):
            main(argv)
        helped = capsys.readouterr().out
        assert helped.count("--kubeconfig FILE") == 2, argv  # in the usage line and the list
        assert helped.count("--namespace NAMESPACE") == 1, argv


def test_completion_reads_the_namespace_typed_before_the_verb() -> None:
    asked: list[list[str]] = []

    def jobs(flags: list[str]) -> list[str]:
        asked.append(flags)
        return ["mnist", "resnet"]

    assert candidates(parser(), ["-n", "team-a", "get", "mn"], jobs) == ["mnist"]
    assert asked == [["-n", "team-a"]]


def test_the_bash_completion_skips_the_namespace_typed_before_the_verb() -> None:
    script = bash_script(parser())
    typed = "COMP_WORDS=(torchjob -n team-a lo); COMP_CWORD=3; _torchjob; echo ${COMPREPLY[@]}"
    completed = subprocess.run(
        ["bash", "-c", f"{script}\n{typed}"], capture_output=True, text=True, check=True
    )
    assert completed.stdout.split() == ["logs"]
