"""A kubelet's log endpoint for the control plane, which has no kubelet: the apiserver serves a
pod's log (`GET pods/<name>/log`) by asking the kubelet of the pod's node, found from the Node's
addresses and `status.daemonEndpoints.kubeletEndpoint.port`. This server answers there, over
HTTPS with a certificate of its own (the test apiserver is given no kubelet CA, so it does not
check it), with the lines a test gives a container (each with the time it was written before it
when asked for `timestamps`, as a kubelet does), and ends a followed log when the test says the
container has stopped."""

from __future__ import annotations

import asyncio
import datetime
import json
import ssl
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from aiohttp import web

from support.controlplane import ControlPlane, free_port
from support.pki import issue_serving_cert, new_ca


class ContainerLog:
    """What one container has written, and whether it has stopped."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.times: list[datetime.datetime] = []
        self.stopped = False
        self.changed = asyncio.Condition()

    async def write(self, line: str) -> None:
        async with self.changed:
            self.lines.append(line)
            self.times.append(datetime.datetime.now(datetime.UTC))
            self.changed.notify_all()

    async def stop(self) -> None:
        async with self.changed:
            self.stopped = True
            self.changed.notify_all()


class LogKubelet:
    def __init__(self) -> None:
        self.logs: dict[tuple[str, str, str], ContainerLog] = {}
        self.port = free_port()

    def log(self, namespace: str, pod: str, container: str) -> ContainerLog:
        return self.logs.setdefault((namespace, pod, container), ContainerLog())

    async def container_logs(self, request: web.Request) -> web.StreamResponse:
        info = request.match_info
        log = self.log(info["namespace"], info["pod"], info["container"])
        response = web.StreamResponse(headers={"Content-Type": "text/plain"})
        await response.prepare(request)
        sent = 0
        follow = request.query.get("follow") == "true"
        timestamps = request.query.get("timestamps") == "true"
        while True:
            async with log.changed:
                if sent == len(log.lines) and follow and not log.stopped:
                    await log.changed.wait()
                new = list(zip(log.times[sent:], log.lines[sent:], strict=True))
                sent = len(log.lines)
                done = log.stopped or not follow
            for time, line in new:
                stamp = time.strftime("%Y-%m-%dT%H:%M:%S.%f000Z ") if timestamps else ""
                await response.write(f"{stamp}{line}\n".encode())
            if done and sent == len(log.lines):
                break
        await response.write_eof()
        return response


def register_node(control_plane: ControlPlane, name: str, port: int) -> None:
    """A Node whose kubelet is this server on loopback."""
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}
    control_plane.kubectl("create", "-f", "-", input=json.dumps(node), check=False)
    status = {
        "status": {
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": port}},
        }
    }
    control_plane.kubectl(
        "patch", "node", name, "--subresource=status", "--type=merge", "-p", json.dumps(status)
    )


@asynccontextmanager
async def log_kubelet(control_plane: ControlPlane, node: str) -> AsyncIterator[LogKubelet]:
    """The server, on the event loop of the test, as the kubelet of the Node `node`."""
    kubelet = LogKubelet()
    app = web.Application()
    app.router.add_get("/containerLogs/{namespace}/{pod}/{container}", kubelet.container_logs)
    certificate = issue_serving_cert(new_ca(), "127.0.0.1", ["127.0.0.1"])
    with tempfile.TemporaryDirectory(prefix="torchjob-kubelet-") as folder:
        cert, key = Path(folder) / "tls.crt", Path(folder) / "tls.key"
        certificate.write(cert, key)
        tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        tls.load_cert_chain(cert, key)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", kubelet.port, ssl_context=tls).start()
        register_node(control_plane, node, kubelet.port)
        try:
            yield kubelet
        finally:
            for log in kubelet.logs.values():
                await log.stop()
            await runner.cleanup()
            control_plane.kubectl("delete", "node", node, "--wait=false", check=False)
