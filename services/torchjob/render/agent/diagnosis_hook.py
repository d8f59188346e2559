"""torchjob's diagnosis hook: imported as `sitecustomize` by every Python process of a training
container (the container's PYTHONPATH starts with the directory the restart agent writes it
to, render/diagnosis.py), it registers the process and, when the agent asks, writes the stacks
of all its threads for the agent to collect. Nothing here may break the training: every error is
swallowed, and the process runs as it would have.

At import it puts back what its PYTHONPATH displaced: the image's own PYTHONPATH (recorded by
the agent, which runs on the same image) and the image's own `sitecustomize`, if any, which it
then runs. Each process registers a file named by its pid that it holds a lock on while it
lives (the agent tells a process that is gone from one that does not answer by the lock); a
forked child registers itself anew. A daemon thread looks every half second whether the agent
asked for diagnosis N, and writes `dumps/N/<pid>.txt` (faulthandler's stacks of every thread,
which need no ptrace) and `dumps/N/<pid>.json` (the threads' names, the main thread, the
process's rank and its torch.distributed backend)."""

from __future__ import annotations

import contextlib
import os
import sys
from typing import IO, Any

HOOK_DIR = os.path.dirname(os.path.abspath(__file__))
DIAGNOSIS_DIR = os.path.dirname(HOOK_DIR)
IMAGE_PYTHONPATH_FILE = os.path.join(DIAGNOSIS_DIR, "image-pythonpath")
ASKED_FILE = os.path.join(DIAGNOSIS_DIR, "asked")
PROCESSES_DIR = os.path.join(DIAGNOSIS_DIR, "processes")
DUMPS_DIR = os.path.join(DIAGNOSIS_DIR, "dumps")
POLL_SECONDS = 0.5
MAX_ARGV = 8
MAX_ARG = 200

_registration: dict[str, IO[str] | None] = {"file": None}


def _number(path: str) -> int:
    try:
        with open(path) as f:
            return int(f.read().strip() or 0)
    except (OSError, ValueError):
        return 0


def _restore_pythonpath() -> None:
    """The image's PYTHONPATH after ours, where the interpreter would have put it; and in the
    environment, for the processes this one starts."""
    if os.environ.get("PYTHONPATH", "") != HOOK_DIR:
        return  # the job set its own PYTHONPATH, which follows ours already
    try:
        with open(IMAGE_PYTHONPATH_FILE) as f:
            image = f.read().strip()
    except OSError:
        return
    entries = [e for e in image.split(os.pathsep) if e]
    at = sys.path.index(HOOK_DIR) + 1 if HOOK_DIR in sys.path else 0
    sys.path[at:at] = [e for e in entries if e not in sys.path]
    if image:
        os.environ["PYTHONPATH"] = HOOK_DIR + os.pathsep + image


def _run_image_sitecustomize() -> None:
    import importlib.machinery
    import importlib.util

    rest = [p for p in sys.path if os.path.abspath(p or ".") != HOOK_DIR]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


def _describe() -> dict[str, Any]:
    import multiprocessing

    argv = [str(a)[:MAX_ARG] for a in sys.argv[:MAX_ARGV]]
    return {
        "pid": os.getpid(),
        "rank": os.environ.get("RANK"),
        "localRank": os.environ.get("LOCAL_RANK"),
        "child": multiprocessing.parent_process() is not None,
        "argv": argv,
    }


def _register() -> None:
    """Register this process (a file it holds locked while it lives) and start its watcher."""
    import fcntl
    import json
    import threading

    previous = _registration["file"]
    if previous is not None:
        previous.close()  # a forked child's copy of its parent's file: the parent's lock stays
    os.makedirs(PROCESSES_DIR, exist_ok=True)
    # Held open for the process's life: its lock says the process lives.
    registered = open(os.path.join(PROCESSES_DIR, f"{os.getpid()}.json"), "w")  # noqa: SIM115
    fcntl.flock(registered, fcntl.LOCK_EX | fcntl.LOCK_NB)
    json.dump(_describe(), registered)
    registered.flush()
    _registration["file"] = registered
    seen = _number(ASKED_FILE)
    threading.Thread(target=_watch, args=(seen,), name="torchjob-diagnosis", daemon=True).start()


def _watch(seen: int) -> None:
    import time

    while True:
        time.sleep(POLL_SECONDS)
        asked = _number(ASKED_FILE)
        if asked > seen:
            seen = asked
            with contextlib.suppress(Exception):
                _dump(asked)


def _backend() -> str | None:
    """The default process group's backend, where torch.distributed has one."""
    distributed = sys.modules.get("torch.distributed")
    try:
        if distributed is None or not distributed.is_initialized():
            return None
        return str(distributed.get_backend())
    except Exception:
        return None


def _dump(number: int) -> None:
    import faulthandler
    import json
    import threading

    folder = os.path.join(DUMPS_DIR, str(number))
    os.makedirs(folder, exist_ok=True)
    base = os.path.join(folder, str(os.getpid()))
    with open(base + ".txt.new", "w") as stacks:
        faulthandler.dump_traceback(file=stacks, all_threads=True)
    about = _describe()
    about["threads"] = {f"0x{t.ident:016x}": t.name for t in threading.enumerate() if t.ident}
    about["main"] = f"0x{threading.main_thread().ident or 0:016x}"
    about["backend"] = _backend()
    with open(base + ".json.new", "w") as f:
        json.dump(about, f)
    os.replace(base + ".txt.new", base + ".txt")
    os.replace(base + ".json.new", base + ".json")  # last: the agent reads it as the answer


def _register_quietly() -> None:
    with contextlib.suppress(Exception):
        _register()


def _install() -> None:
    _restore_pythonpath()
    try:
        _run_image_sitecustomize()
    finally:
        _register()
        os.register_at_fork(after_in_child=_register_quietly)


with contextlib.suppress(Exception):
    _install()
