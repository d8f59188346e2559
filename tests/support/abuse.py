"""Abuse of the webhook's admission port, as anyone with a route to it could send: large bodies
back to back, and bodies sent in part and left hanging (slowloris). For the e2e test that
admission and probes still answer meanwhile, and for the benchmark that measures them."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import copy
import ssl
import uuid
from types import TracebackType
from typing import Any

import aiohttp
import orjson

from support.jobs import job_manifest

VALIDATE = "/validate/pytorchtrainingjobs"


def expensive_review(size: int) -> bytes:
    """A job validation review of about `size` bytes whose validation costs the most per byte
    of the shapes measured: many replica specs of distinct types."""
    job = job_manifest("torchrun")
    replica = job["spec"]["replicaSpecs"][0]
    count = 1
    while True:
        job["spec"]["replicaSpecs"] = [
            {**copy.deepcopy(replica), "type": f"t{i}"} for i in range(count)
        ]
        body = orjson.dumps(_review(job))
        if len(body) >= size:
            return body
        count = max(count + 1, count * size // len(body))


def _review(job: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "operation": "CREATE",
            "namespace": "default",
            "name": job["metadata"]["name"],
            "userInfo": {"username": "mallory"},
            "object": job,
        },
    }


def insecure_context() -> ssl.SSLContext:
    """The attacker does not care whose certificate it is."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


class Abuse:
    """`floods` senders posting `body` back to back and `hanging` connections each announcing
    `len(body)` bytes and sending a few, all to https://127.0.0.1:`port`, until the block ends.
    `outcomes` counts what came back: HTTP statuses, "closed" (a hanging body cut off) and
    "error" (a connection the server reset or refused)."""

    def __init__(self, port: int, body: bytes, floods: int = 20, hanging: int = 20) -> None:
        self.port = port
        self.body = body
        self.floods = floods
        self.hanging = hanging
        self.outcomes: collections.Counter[str] = collections.Counter()
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    async def __aenter__(self) -> Abuse:
        self._tasks = [asyncio.create_task(self._flood()) for _ in range(self.floods)]
        self._tasks += [asyncio.create_task(self._hang()) for _ in range(self.hanging)]
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._stop.set()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    @property
    def answered(self) -> int:
        return sum(self.outcomes.values())

    async def _flood(self) -> None:
        connector = aiohttp.TCPConnector(ssl=insecure_context())
        timeout = aiohttp.ClientTimeout(total=60)
        url = f"https://127.0.0.1:{self.port}{VALIDATE}"
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
            while not self._stop.is_set():
                try:
                    async with session.post(url, data=self.body) as response:
                        await response.read()
                        self.outcomes[str(response.status)] += 1
                except (aiohttp.ClientError, TimeoutError, OSError):
                    self.outcomes["error"] += 1
                    await asyncio.sleep(0.01)

    async def _hang(self) -> None:
        head = (
            f"POST {VALIDATE} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(self.body)}\r\n\r\n"
        ).encode()
        while not self._stop.is_set():
            try:
                reader, writer = await asyncio.open_connection(
                    "127.0.0.1", self.port, ssl=insecure_context()
                )
            except OSError:
                self.outcomes["error"] += 1
                await asyncio.sleep(0.05)
                continue
            try:
                writer.write(head + self.body[:100])
                await writer.drain()
                status = await reader.readline()
                self.outcomes[status.split(b" ")[1].decode() if status else "closed"] += 1
            except (OSError, IndexError):
                self.outcomes["error"] += 1
            finally:
                writer.close()
                with contextlib.suppress(OSError, ssl.SSLError):
                    await writer.wait_closed()
