"""The restart agent: a native sidecar of every replica pod made to restart in place
(render/in_place.py), on the training container's image and Python, started as
`python -c <this file> ASKED_DIR STARTS_FILE DIAGNOSIS_DIR HOOK_SOURCE`.

Restarts: ASKED_DIR holds, through the downward API, the pod's restarts-asked and diagnoses-asked
annotations. The agent counts its own starts in STARTS_FILE (a memory emptyDir the restart
keeps); once the restarts asked exceed its starts before this one, it exits RESTART_EXIT_CODE,
the code its rule restarts every container of the pod on.

Diagnosis (render/diagnosis.py): at start it writes the diagnosis hook (HOOK_SOURCE) into
DIAGNOSIS_DIR/python/sitecustomize.py and the image's PYTHONPATH beside it, then READY_FILE,
which its postStart hook waits for so that the training container starts after them. When the
diagnoses asked exceed those it answered, it asks every registered training process for its
stacks (DIAGNOSIS_DIR/asked), waits up to ANSWER_SECONDS for their answers, prints every
answer whole (the pod's log keeps them, for whoever may read it) and last one line,
REPORT_PREFIX and a JSON summary, which the reconciler reads from the log's tail. It keeps that
report and prints it again when it starts anew, so the pod's current log holds the latest one.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from typing import Any

RESTART_EXIT_CODE = 86
REPORT_PREFIX = "torchjob-diagnosis "
READY_FILE = "ready"
ANSWER_SECONDS = 3.0
POLL_SECONDS = 0.25
KEPT_DIAGNOSES = 2  # the dumps of the latest ones stay in DIAGNOSIS_DIR
MAX_PROCESSES = 32
MAX_STACKS_BYTES = 64 * 1024  # of one process's stacks printed
MAX_FRAMES = 12  # of the main thread's, innermost first, in the summary
MAX_TEXT = 200
LATEST_REPORT = "latest-report.txt"
# How often the files of processes gone are removed (a job that starts many short Python
# processes would fill the volume with them).
PRUNE_SECONDS = 60.0


def number(path: str) -> int:
    try:
        with open(path) as f:
            return int(f.read().strip() or 0)
    except (OSError, ValueError):
        return 0


def write(path: str, text: str) -> None:
    with open(path + ".new", "w") as f:
        f.write(text)
    os.replace(path + ".new", path)


def install(diagnosis_dir: str, hook_source: str) -> None:
    """The hook the training processes import, the image's PYTHONPATH it puts back, and the
    file that lets the training container start."""
    python = os.path.join(diagnosis_dir, "python")
    os.makedirs(python, exist_ok=True)
    write(os.path.join(python, "sitecustomize.py"), hook_source)
    write(os.path.join(diagnosis_dir, "image-pythonpath"), os.environ.get("PYTHONPATH", ""))
    write(os.path.join(diagnosis_dir, READY_FILE), "")


def live_processes(diagnosis_dir: str) -> list[dict[str, Any]]:
    """The registered processes that still hold their file's lock, each as it described
    itself; the files of those gone are removed."""
    import fcntl

    folder = os.path.join(diagnosis_dir, "processes")
    found = []
    for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else ():
        path = os.path.join(folder, name)
        try:
            with open(path) as f:
                try:
                    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:
                    found.append(json.loads(f.read() or "{}"))
                    continue
            os.remove(path)  # its process is gone
        except (OSError, ValueError):
            continue
    return found[:MAX_PROCESSES]


def thread_of(line: str) -> str | None:
    """The thread a line of faulthandler's text heads ("Thread 0x... (most recent call
    first):", "Current thread 0x..."), else None."""
    if not line.startswith(("Thread 0x", "Current thread 0x")):
        return None
    return next((word for word in line.split() if word.startswith("0x")), None)


def parse_stacks(text: str) -> dict[str, list[list[Any]]]:
    """faulthandler's text -> each thread's frames, innermost first: [file, line, function]."""
    threads: dict[str, list[list[Any]]] = {}
    frames: list[list[Any]] = []
    for line in text.splitlines():
        ident = thread_of(line)
        if ident is not None:
            frames = threads.setdefault(ident, [])
        elif line.startswith('  File "') and '", line ' in line:
            path, _, rest = line[len('  File "') :].partition('", line ')
            where, _, function = rest.partition(" in ")
            frames.append([path[-MAX_TEXT:], int(where) if where.isdigit() else 0, function])
    return threads


def answer_of(diagnosis_dir: str, asked: int, process: dict[str, Any]) -> dict[str, Any] | None:
    base = os.path.join(diagnosis_dir, "dumps", str(asked), str(process.get("pid")))
    try:
        with open(base + ".json") as f:
            about: dict[str, Any] = json.load(f)
        with open(base + ".txt", errors="replace") as f:
            about["stacks"] = f.read(MAX_STACKS_BYTES)
    except (OSError, ValueError):
        return None
    return about


def collect(diagnosis_dir: str, asked: int) -> list[dict[str, Any]]:
    """Ask every live training process for its stacks; what each answered, or that it did not."""
    processes = live_processes(diagnosis_dir)
    write(os.path.join(diagnosis_dir, "asked"), str(asked))
    deadline = time.monotonic() + ANSWER_SECONDS
    answers: dict[Any, dict[str, Any]] = {}
    while True:
        for process in processes:
            if process.get("pid") not in answers:
                answer = answer_of(diagnosis_dir, asked, process)
                if answer is not None:
                    answers[process.get("pid")] = answer
        if len(answers) == len(processes) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    return [answers.get(p.get("pid"), dict(p, answered=False)) for p in processes]


def summary_of(answer: dict[str, Any]) -> dict[str, Any]:
    """What the reconciler reads of one process's answer (bounded)."""
    fields = ("pid", "rank", "localRank", "child", "backend")
    summary = {k: answer.get(k) for k in fields}
    summary["argv"] = [str(a)[:MAX_TEXT] for a in answer.get("argv") or []][:8]
    summary["answered"] = answer.get("answered", True)
    if summary["answered"]:
        threads = parse_stacks(answer.get("stacks") or "")
        summary["main"] = threads.get(answer.get("main") or "", [])[:MAX_FRAMES]
    return summary


def report(diagnosis_dir: str, asked: int, answers: list[dict[str, Any]]) -> None:
    """Every answer whole, then the one line the reconciler reads; kept as LATEST_REPORT too,
    which the agent prints again when it starts anew (a restart in place), so that the pod's
    current log holds its latest diagnosis."""
    lines = []
    for answer in answers:
        argv = " ".join(str(a) for a in answer.get("argv") or [])[:MAX_TEXT]
        heading = f"pid {answer.get('pid')} rank {answer.get('rank')} ({argv})"
        lines.append(f"=== torchjob diagnosis {asked}: {heading} ===")
        if answer.get("answered", True):
            names = answer.get("threads") or {}
            for line in (answer.get("stacks") or "").splitlines():
                ident = thread_of(line)
                lines.append(line if ident is None else f"{line} [{names.get(ident, '?')}]")
        else:
            lines.append(
                f"did not answer within {ANSWER_SECONDS:g}s: stopped, or holding Python's lock"
            )
    summary = {"number": asked, "processes": [summary_of(a) for a in answers]}
    lines.append(REPORT_PREFIX + json.dumps(summary, separators=(",", ":")))
    text = "\n".join(lines) + "\n"
    write(os.path.join(diagnosis_dir, LATEST_REPORT), text)
    print(text, end="", flush=True)


def repeat_latest(diagnosis_dir: str) -> None:
    try:
        with open(os.path.join(diagnosis_dir, LATEST_REPORT), errors="replace") as f:
            text = f.read()
    except OSError:
        return
    print(text, end="", flush=True)


def forget_old(diagnosis_dir: str, asked: int) -> None:
    import shutil

    folder = os.path.join(diagnosis_dir, "dumps")
    for name in os.listdir(folder) if os.path.isdir(folder) else ():
        if name.isdigit() and int(name) <= asked - KEPT_DIAGNOSES:
            shutil.rmtree(os.path.join(folder, name), ignore_errors=True)


def main(asked_dir: str, starts_file: str, diagnosis_dir: str, hook_source: str) -> int:
    # As its container's first process, the agent would ignore SIGTERM (the kernel drops a
    # signal PID 1 has no handler for) and hold every deleted pod for its whole grace period.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    install(diagnosis_dir, hook_source)
    repeat_latest(diagnosis_dir)
    starts = number(starts_file)
    write(starts_file, str(starts + 1))
    answered_file = os.path.join(diagnosis_dir, "answered")
    pruned = time.monotonic()
    while True:
        restarts = number(os.path.join(asked_dir, "restarts"))
        if restarts > starts:
            print(f"restart {restarts} asked: restarting every container of the pod", flush=True)
            return RESTART_EXIT_CODE
        asked = number(os.path.join(asked_dir, "diagnoses"))
        if asked > number(answered_file):
            report(diagnosis_dir, asked, collect(diagnosis_dir, asked))
            write(answered_file, str(asked))
            forget_old(diagnosis_dir, asked)
        if time.monotonic() - pruned > PRUNE_SECONDS:
            live_processes(diagnosis_dir)  # the files of processes gone are removed
            pruned = time.monotonic()
        time.sleep(POLL_SECONDS)


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:5]))
