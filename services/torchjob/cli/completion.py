"""`torchjob completion bash|zsh`: a completion script written from the command's own parser, so
it never lists a flag the command lacks. Job names are completed by asking the cluster
(`torchjob list -o name`, with the --kubeconfig, --context and -n already typed: a job of another
API than PyTorchTrainingJob's as `kind/NAME`). zsh loads the
bash script through bashcompinit."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable

from torchjob.cli.command_parser import CommandParser
from torchjob.cli.commands import EXIT_SUCCEEDED, target_of
from torchjob.cli.connection import CliError, connect
from torchjob.views.cli.tables import in_list_order, listed_name

COMPLETION_TIMEOUT = 5.0
# The commands whose first positional argument is a job's name.
TAKES_JOB = (
    "get",
    "logs",
    "diagnose",
    "delete",
    "pause",
    "resume",
    "wait",
    "tensorboard",
    "top job",
)
# The commands whose arguments are files (a manifest; `convert -o` the file it writes).
TAKES_FILE = ("run", "convert")


def _options(parser: CommandParser) -> list[str]:
    return sorted(
        {s for option in parser.options for s in option.strings if s.startswith("--")}
        | {s for option in parser.options for s in option.strings if len(s) == 2}
    )


def _choices(parser: CommandParser) -> dict[str, list[str]]:
    return {
        written: list(option.choices)
        for option in parser.options
        if option.choices
        for written in option.strings
    }


def _command_cases(commands: dict[str, CommandParser]) -> list[str]:
    """A `case` branch per command (per `top job` and `top node` for a nested one)."""
    cases = []
    for name, sub in sorted(commands.items()):
        nested = sub.commands
        if nested:
            for inner, inner_parser in sorted(nested.items()):
                cases.append(_case(f"{name} {inner}", inner_parser))
            words = " ".join(sorted(nested))
            cases.append(f'        "{name}") words="{words}" ;;')
        else:
            cases.append(_case(name, sub))
    return cases


def bash_script(parser: CommandParser, prog: str = "torchjob") -> str:
    commands = parser.commands
    cases = _command_cases(commands)
    function = "_" + prog.replace("-", "_").replace(" ", "_")
    takes_job = " ".join(c.replace(" ", "_") for c in TAKES_JOB)
    takes_file = "|".join(TAKES_FILE)
    return f"""# bash completion for {prog}; load it with: source <({prog} completion bash)
{function}_jobs() {{
    local args=() i
    for ((i = 1; i < COMP_CWORD; i++)); do
        case "${{COMP_WORDS[i]}}" in
            --kubeconfig|--context|-n|--namespace)
                args+=("${{COMP_WORDS[i]}}" "${{COMP_WORDS[i+1]}}") ;;
            --kubeconfig=*|--context=*|--namespace=*) args+=("${{COMP_WORDS[i]}}") ;;
        esac
    done
    {prog} list -o name "${{args[@]}}" 2>/dev/null
}}

{function}() {{
    local cur prev command="" i words="" choices=""
    cur="${{COMP_WORDS[COMP_CWORD]}}"
    prev="${{COMP_WORDS[COMP_CWORD-1]}}"
    for ((i = 1; i < COMP_CWORD; i++)); do
        case "${{COMP_WORDS[i]}}" in
            --kubeconfig|--context|-n|--namespace) ((i++)) ;;
            -*) ;;
            *) if [[ -z "$command" ]]; then command="${{COMP_WORDS[i]}}";
               elif [[ "$command" == top && "${{COMP_WORDS[i]}}" =~ ^(job|node)$ ]]; then
                   command="top ${{COMP_WORDS[i]}}"; fi ;;
        esac
    done
    if [[ -z "$command" ]]; then
        COMPREPLY=($(compgen -W "{" ".join(sorted(commands))}" -- "$cur"))
        return
    fi
    case "$command" in
{chr(10).join(cases)}
    esac
    if [[ -n "$choices" ]]; then
        COMPREPLY=($(compgen -W "$choices" -- "$cur"))
    elif [[ "$cur" == -* ]]; then
        COMPREPLY=($(compgen -W "$words" -- "$cur"))
    elif [[ "$prev" =~ ^(-f|--filename|--kubeconfig)$ || "$command" =~ ^({takes_file})$ ]]; then
        COMPREPLY=($(compgen -f -- "$cur"))
    elif [[ " {takes_job} " == *" ${{command// /_}} "* ]]; then
        COMPREPLY=($(compgen -W "$({function}_jobs)" -- "$cur"))
    elif [[ "$command" == top ]]; then
        COMPREPLY=($(compgen -W "$words" -- "$cur"))
    fi
}}
complete -o default -F {function} {prog}
"""


def _case(name: str, parser: CommandParser) -> str:
    lines = [f'        "{name}")', f'            words="{" ".join(_options(parser))}"']
    choices = _choices(parser)
    if choices:
        lines.append('            case "$prev" in')
        for option, values in sorted(choices.items()):
            lines.append(f'                {option}) choices="{" ".join(values)}" ;;')
        lines.append("            esac")
    lines.append("            ;;")
    return "\n".join(lines)


def zsh_script(parser: CommandParser, prog: str = "torchjob") -> str:
    return (
        f"# zsh completion for {prog}; load it with: source <({prog} completion zsh)\n"
        "autoload -U +X compinit && compinit\n"
        "autoload -U +X bashcompinit && bashcompinit\n" + bash_script(parser, prog)
    )


async def completion(args: argparse.Namespace) -> int:
    parser: CommandParser = args.parser
    script = bash_script if args.shell == "bash" else zsh_script
    sys.stdout.write(script(parser))
    return EXIT_SUCCEEDED


def _takes_value(parser: CommandParser, written: str) -> bool:
    option = parser.option(written)
    return option is not None and option.takes_value


def candidates(
    parser: CommandParser, words: list[str], jobs: Callable[[list[str]], list[str]]
) -> list[str]:
    """What may come in place of the last of `words` (the words typed after the program's name,
    the last one being completed); `jobs(cluster_flags)` lists job names when one is wanted."""
    *done, current = words or [""]
    command: list[str] = []
    cluster_flags: list[str] = []
    chosen = parser
    skip = False
    for index, word in enumerate(done):
        if skip:
            skip = False
            continue
        if word.startswith("-"):
            if word in ("--kubeconfig", "--context", "-n", "--namespace") and index + 1 < len(done):
                cluster_flags += [word, done[index + 1]]
            elif word.split("=", 1)[0] in ("--kubeconfig", "--context", "--namespace"):
                cluster_flags.append(word)
            skip = "=" not in word and _takes_value(chosen, word)
            continue
        nested = chosen.commands
        if word in nested:
            command.append(word)
            chosen = nested[word]
        else:
            command.append(word)  # a positional argument
    prev = done[-1] if done else ""
    choices = _choices(chosen)
    if prev in choices:
        found = choices[prev]
    elif current.startswith("-"):
        found = _options(chosen)
    elif chosen.commands:
        found = sorted(chosen.commands)
    elif " ".join(command) in TAKES_JOB:
        found = jobs(cluster_flags)
    else:
        found = []
    return [c for c in found if c.startswith(current)]


def job_names(cluster_flags: list[str]) -> list[str]:
    """The jobs of the namespace as the commands take them (`kind/NAME` for a job of another API
    than PyTorchTrainingJob's), or none when the cluster cannot be asked."""
    options = argparse.ArgumentParser(add_help=False)
    options.add_argument("--kubeconfig")
    options.add_argument("--context")
    options.add_argument("-n", "--namespace")
    args, _ = options.parse_known_args(cluster_flags)

    async def listed() -> list[str]:
        async with connect(target_of(args)) as cluster:
            listing = await cluster.list_every_kind()
            return [listed_name(job) for job in in_list_order(listing.jobs)]

    try:
        return asyncio.run(asyncio.wait_for(listed(), COMPLETION_TIMEOUT))
    except (CliError, TimeoutError):
        return []
