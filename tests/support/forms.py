"""Hypothesis strategies for the console's job form: forms as people fill them in."""

from __future__ import annotations

import dataclasses
import shlex

from hypothesis import strategies as st

from torchjob.views.console.command_line import container_command, line_of_container
from torchjob.views.console.job_form import CLEAN_UP_POLICIES, RESTART_POLICIES, JobForm

NAMES = st.from_regex(r"[a-z][a-z0-9-]{0,20}[a-z0-9]", fullmatch=True)
WORDS = st.lists(st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1))
NUMBERS = st.integers(0, 10_000).map(str)
# Command lines as people write them: a program (python or not), a script or module, options.
LINES = st.tuples(
    st.sampled_from(["python", "python3", "/usr/bin/python3.11", "bash", "./run.sh", "train.py"]),
    st.lists(st.sampled_from(["-m", "pkg.train", "train.py", "-u", "--epochs", "3", "a b"])),
).map(lambda line: [line[0], *line[1]])
QUANTITIES = st.sampled_from(["", "1", "500m", "2", "4Gi", "512Mi"])
PATHS = st.sampled_from(["", "/data", "/workspace", "logs", "runs/1"])


def optional(values: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.just("") | values


def shown_line(line: str, torchrun: bool) -> str:
    """The command line the form shows for the container `line` makes (`python` before a
    script torchrun starts)."""
    return shlex.join(line_of_container(*container_command(shlex.split(line), torchrun), torchrun))


FORMS = st.builds(
    JobForm,
    name=optional(NAMES),
    torchrun=st.booleans(),
    proc_per_node=optional(st.sampled_from(["1", "4", "gpu"])),
    max_restarts=optional(NUMBERS),
    replicas=optional(NUMBERS),
    image=optional(st.sampled_from(["pytorch/pytorch:2.3", "t9kpublic/mnist:1"])),
    command_line=(WORDS | LINES).map(shlex.join),
    working_dir=PATHS,
    cpu_request=QUANTITIES,
    memory_request=QUANTITIES,
    cpu_limit=QUANTITIES,
    memory_limit=QUANTITIES,
    gpus=optional(st.sampled_from(["1", "2", "8"])),
    pvc_claim=optional(NAMES),
    pvc_mount_path=PATHS,
    shm=st.booleans(),
    restart_policy=optional(st.sampled_from(RESTART_POLICIES)),
    backoff_limit=optional(NUMBERS),
    active_deadline_seconds=optional(NUMBERS),
    clean_up_policy=optional(st.sampled_from(CLEAN_UP_POLICIES)),
    tensorboard=st.booleans(),
    tensorboard_image=optional(st.just("tensorflow/tensorflow:2.15")),
    tensorboard_log_path=PATHS,
    queue=optional(NAMES),
    priority=optional(st.integers(0, 100).map(str)),
).map(
    # TensorBoard's fields say nothing while it is off, and the manifest holds nothing of them;
    # the command line is as the form shows it.
    lambda form: dataclasses.replace(
        form,
        tensorboard_image=form.tensorboard_image if form.tensorboard else "",
        tensorboard_log_path=form.tensorboard_log_path if form.tensorboard else "",
        command_line=shown_line(form.command_line, form.torchrun),
    )
)
