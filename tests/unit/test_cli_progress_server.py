"""`torchjob run`'s progress endpoint in process: Kubeflow Trainer's answers (200 with the written
`trainerStatus`, else a metav1.Status), its secret, the environment it gives replicas, and the
progress lines it prints."""

from __future__ import annotations

import io
import os
import stat
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from support.jobs import JobBuilder

from torchjob.api.job_api import KUBEFLOW_JOB, TRAINING_JOB
from torchjob.api.progress import (
    ANNOTATION_PROGRESS,
    ENV_CA_CERT,
    ENV_TOKEN,
    ENV_URL,
    MAX_BODY_BYTES,
    JobRef,
)
from torchjob.cli.manifest import admit
from torchjob.cli.progress_server import (
    TOKEN_FILE,
    LocalProgress,
    duration,
    local_progress,
    progress_line,
    short,
)
from torchjob.cli.terminal import Console

JOB = JobRef(TRAINING_JOB, "default", "j")
REPORT = {
    "trainerStatus": {
        "progressPercentage": 45,
        "estimatedRemainingSeconds": 130,
        "metrics": [{"name": "loss", "value": 0.25}, {"name": "epoch", "value": "2"}],
        "lastUpdatedTime": "2026-01-02T03:04:05Z",
    }
}


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def said() -> io.StringIO:
    return io.StringIO()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def progress(tmp_path: Path, said: io.StringIO, clock: Clock) -> AsyncIterator[LocalProgress]:
    served = LocalProgress(JOB, Console(io.StringIO(), said, live=False), tmp_path, clock)
    await served.start()
    try:
        yield served
    finally:
        await served.stop()


async def post(
    progress: LocalProgress,
    body: Any = REPORT,
    *,
    token: str | None = None,
    path: str | None = None,
    method: str = "POST",
) -> tuple[int, dict[str, Any]]:
    """The answer to one request: its status code and its JSON body."""
    secret = progress.token_file.read_text() if token is None else token
    url = progress.url if path is None else f"http://127.0.0.1:{progress.port}{path}"
    data = body if isinstance(body, bytes) else aiohttp.JsonPayload(body)
    async with (
        aiohttp.ClientSession() as session,
        session.request(
            method, url, data=data, headers={"Authorization": f"Bearer {secret}"}
        ) as answer,
    ):
        assert answer.content_type == "application/json"
        return answer.status, await answer.json()


def lines(said: io.StringIO) -> list[str]:
    return said.getvalue().splitlines()


async def test_a_report_is_written_as_the_job_status_shows_it(progress: LocalProgress) -> None:
    code, body = await post(progress)
    assert code == 200
    written = body["trainerStatus"]
    assert written["progressPercentage"] == 45
    assert written["estimatedRemainingSeconds"] == 130
    assert written["metrics"] == [
        {"name": "loss", "value": "0.25"},
        {"name": "epoch", "value": "2"},
    ]
    # When the endpoint received it, not what the reporter's clock said.
    assert written["lastUpdatedTime"] != "2026-01-02T03:04:05Z"
    assert progress.latest == written
    assert progress.with_report({"phase": "Running"}) == {
        "phase": "Running",
        "trainerStatus": written,
    }


async def test_each_report_replaces_the_last_and_cleared_fields_are_absent(
    progress: LocalProgress,
) -> None:
    await post(progress)
    code, body = await post(progress, {"trainerStatus": {"progressPercentage": 50}})
    assert code == 200
    assert set(body["trainerStatus"]) == {"progressPercentage", "lastUpdatedTime"}
    assert progress.latest == body["trainerStatus"]


async def test_without_a_report_the_status_is_left_alone(tmp_path: Path) -> None:
    unused = LocalProgress(JOB, Console(io.StringIO(), io.StringIO(), live=False), tmp_path)
    await unused.stop()
    assert unused.with_report({"phase": "Succeeded"}) == {"phase": "Succeeded"}


@pytest.mark.parametrize(
    ("request_", "code", "reason"),
    [
        ({"token": "not-the-secret"}, 401, "Unauthorized"),
        ({"token": ""}, 401, "Unauthorized"),
        ({"path": JobRef(TRAINING_JOB, "default", "other").path}, 404, "NotFound"),
        ({"path": JobRef(KUBEFLOW_JOB, "default", "j").path}, 404, "NotFound"),
        ({"path": "/healthz"}, 404, "NotFound"),
        ({"method": "PUT"}, 405, "MethodNotAllowed"),
        ({"body": b"x" * (MAX_BODY_BYTES + 1)}, 413, "RequestEntityTooLarge"),
        ({"body": b"{not json"}, 400, "BadRequest"),
        ({"body": b"\xff\xfe"}, 400, "BadRequest"),
        ({"body": [1, 2]}, 422, "Invalid"),
        ({"body": {"trainerStatus": {"progressPercentage": 101}}}, 422, "Invalid"),
        (
            {"body": {"trainerStatus": {"metrics": [{"name": "x" * 65, "value": "1"}]}}},
            422,
            "Invalid",
        ),
    ],
)
async def test_a_refused_request_gets_a_metav1_status_and_writes_nothing(
    progress: LocalProgress, request_: dict[str, Any], code: int, reason: str
) -> None:
    answered, body = await post(progress, **request_)
    assert answered == code
    assert body == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": body["message"],
        "reason": reason,
        "code": code,
    }
    assert body["message"]
    assert progress.latest is None


async def test_an_invalid_report_names_its_field(progress: LocalProgress) -> None:
    _, body = await post(progress, {"trainerStatus": {"estimatedRemainingSeconds": -1}})
    assert body["message"].startswith("trainerStatus.estimatedRemainingSeconds: ")


async def test_the_secret_is_private_to_the_run_and_gone_after_it(tmp_path: Path) -> None:
    progress = LocalProgress(JOB, Console(io.StringIO(), io.StringIO(), live=False), tmp_path)
    token_file = tmp_path / TOKEN_FILE
    assert progress.token_file == token_file
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    assert len(token_file.read_text()) >= 32
    await progress.serve(post(progress))
    assert progress.latest is not None
    assert not token_file.exists()


async def test_without_a_run_directory_the_secret_has_a_private_one(tmp_path: Path) -> None:
    progress = LocalProgress(JOB, Console(io.StringIO(), io.StringIO(), live=False), None)
    directory = progress.token_file.parent
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    await progress.serve(post(progress))
    assert not directory.exists()


async def test_replicas_inherit_this_run_s_endpoint_and_no_other(tmp_path: Path) -> None:
    progress = LocalProgress(JOB, Console(io.StringIO(), io.StringIO(), live=False), tmp_path)
    await progress.stop()
    inherited = {
        "HOME": "/home/u",
        ENV_URL: "https://elsewhere/status",
        ENV_TOKEN: "/elsewhere/token",
        ENV_CA_CERT: "/elsewhere/ca.crt",
    }
    env = progress.environment(inherited)
    assert env == {
        "HOME": "/home/u",
        ENV_URL: f"http://127.0.0.1:{progress.port}{JOB.path}",
        ENV_TOKEN: str(tmp_path / TOKEN_FILE),
    }
    assert inherited[ENV_CA_CERT] == "/elsewhere/ca.crt"  # the caller's own is left as it was
    proxied = progress.environment({"HTTPS_PROXY": "x", "http_proxy": "p", "NO_PROXY": "a.b"})
    assert proxied["NO_PROXY"] == "a.b,127.0.0.1"
    assert proxied["no_proxy"] == "127.0.0.1"


async def test_a_line_per_report_at_most_every_few_seconds_and_always_the_last(
    progress: LocalProgress, said: io.StringIO, clock: Clock
) -> None:
    await post(progress)
    assert lines(said) == ["torchjob: progress 45% · eta 2m10s · loss=0.25 · epoch=2"]
    clock.now += 1
    await post(progress, {"trainerStatus": {"progressPercentage": 50}})
    clock.now += 1
    await post(progress, {"trainerStatus": {"progressPercentage": 55}})
    assert len(lines(said)) == 1
    clock.now += 4
    await post(progress, {"trainerStatus": {"progressPercentage": 60}})
    assert lines(said)[1:] == ["torchjob: progress 60%"]
    clock.now += 1
    await post(progress, {"trainerStatus": {"progressPercentage": 100}})
    assert lines(said)[2:] == ["torchjob: progress 100%"]
    clock.now += 1
    await post(progress, {"trainerStatus": {"metrics": [{"name": "loss", "value": "0.1"}]}})
    assert len(lines(said)) == 3
    await progress.stop()  # the last report, not shown yet, is shown at the end
    assert lines(said)[3:] == ["torchjob: progress · loss=0.1"]


def test_a_progress_line() -> None:
    metrics = [{"name": f"m{i}", "value": str(i)} for i in range(8)]
    line = progress_line(
        {"progressPercentage": 7, "estimatedRemainingSeconds": 3725, "metrics": metrics}
    )
    assert line == "progress 7% · eta 1h02m · m0=0 · m1=1 · m2=2 · m3=3 · m4=4 · m5=5 · +2 more"
    assert [
        short(v) for v in ("0.6910826683", "3.3333333e-05", "421032960.0", "7", "nan", "x")
    ] == [
        "0.6911",
        "3.333e-05",
        "4.21e+08",
        "7",
        "nan",
        "x",
    ]
    assert [duration(s) for s in (0, 59, 60, 130, 3600)] == ["0s", "59s", "1m00s", "2m10s", "1h00m"]


async def test_the_job_s_annotation_turns_reporting_off(tmp_path: Path) -> None:
    console = Console(io.StringIO(), io.StringIO(), live=False)
    builder = JobBuilder("j").replicas("worker", 1)
    on = local_progress(admit(builder.build()), console, tmp_path)
    assert on is not None and on.job == JobRef(TRAINING_JOB, "default", "j")
    await on.stop()
    off = builder.metadata(annotations={ANNOTATION_PROGRESS: "false"}).build()
    assert local_progress(admit(off), console, tmp_path) is None
    assert os.listdir(tmp_path) == []
