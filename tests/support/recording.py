"""An apiserver stand-in for the executor's unit tests: it answers every request and keeps what
was asked; the objects named in `gone` answer 404, as when they are gone already. What a real
apiserver does with such requests is the e2e tier's to show."""

from __future__ import annotations

from typing import Any, cast

from torchjob.kube.client import KubeClient
from torchjob.kube.errors import NotFound
from torchjob.kube.events import EventRecorder
from torchjob.kube.expectations import Expectations
from torchjob.reconciler.executor import ReconcilerExecutor
from torchjob.render.scheduling import SchedulingSettings


class RecordingApiserver:
    def __init__(self, *gone: str) -> None:
        self.gone = gone
        self.patches: list[tuple[str, Any]] = []  # path, body
        self.deletes: list[str] = []  # paths, without their query

    async def request(self, method: str, path: str, *, body: Any = None, **_: Any) -> bytes:
        bare = path.split("?")[0]
        if method == "DELETE":
            self.deletes.append(bare)
        if method in ("PATCH", "DELETE") and bare.rsplit("/", 1)[-1] in self.gone:
            raise NotFound(404, "NotFound", f"{bare} not found")
        if method == "PATCH" and "/pods/" in path:
            self.patches.append((path, body))
        return b"{}"

    def executor(self) -> ReconcilerExecutor:
        """A reconciler's executor that sends its requests here."""
        client = cast(KubeClient, self)
        recorder = EventRecorder(client, "torchjob-reconciler", "test")
        return ReconcilerExecutor(client, recorder, Expectations(), SchedulingSettings())
