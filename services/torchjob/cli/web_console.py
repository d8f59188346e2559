"""`torchjob console`: open the console, the job manager in the browser that the chart deploys with
`console.enabled=true`. From a workstation: forward a local port to its Service with kubectl
port-forward (cli/port_forward.py), print the local URL and open it in the browser, until
interrupted. Inside a pod of the cluster (no kubeconfig): print the Service's in-cluster URL.

The console acts as whoever signs in to it, so nothing here grants anything: the port-forward
needs only the right to forward to the operator's pods, and the pages then ask for a token of the
user's own."""

from __future__ import annotations

import argparse
import os
import sys
import threading
import webbrowser
from collections.abc import Callable
from typing import Any, Protocol

from torchjob.cli.commands import EXIT_SUCCEEDED
from torchjob.cli.connection import CliError, Target, connect, kubeconfig_path
from torchjob.cli.port_forward import forward, kubectl_path, port_forward_argv
from torchjob.kube import errors, kubeconfig

SERVICE = "torchjob-console"
OPERATOR_NAMESPACE = "torchjob-system"
SERVICE_PORT = 80  # the chart's console.service.port, when the Service cannot be read


class ServiceReader(Protocol):
    """The part of the CLI's Cluster this command uses."""

    namespace: str

    async def service(self, name: str) -> dict[str, Any] | None: ...


def target_of(args: argparse.Namespace) -> Target:
    """The kubeconfig and context the command was given; the namespace is the operator's."""
    return Target(
        kubeconfig=getattr(args, "kubeconfig", None),
        context=getattr(args, "context", None),
        namespace=args.namespace_of_operator,
    )


def in_cluster(target: Target) -> bool:
    """In a pod, with no kubeconfig: the CLI then talks to the cluster as the pod's
    ServiceAccount (cli/connection.py), and the Service is reachable by its name."""
    if not os.environ.get("KUBERNETES_SERVICE_HOST") or kubeconfig_path(target) or target.context:
        return False
    return not os.path.exists(os.path.expanduser(kubeconfig.DEFAULT_PATH))


async def console_port(cluster: ServiceReader) -> int:
    """The port of the console's Service (its "http" port); a CliError saying how to deploy the
    console when the Service is absent."""
    service = await cluster.service(SERVICE)
    if service is None:
        raise CliError(
            f"there is no console in namespace {cluster.namespace}: the Service {SERVICE} does "
            "not exist. Install the chart with console.enabled=true (helm upgrade <release> "
            f"charts/torchjob -n {cluster.namespace} --reuse-values --set console.enabled=true), "
            "or give --namespace-of-operator NS, the namespace torchjob is installed in"
        )
    ports = (service.get("spec") or {}).get("ports") or []
    chosen = next((p for p in ports if p.get("name") == "http"), ports[0] if ports else {})
    return int(chosen.get("port") or SERVICE_PORT)


def in_cluster_url(namespace: str, port: int) -> str:
    where = f"{SERVICE}.{namespace}.svc" + ("" if port == SERVICE_PORT else f":{port}")
    return f"http://{where}/"


def forward_argv(args: argparse.Namespace, service_port: int) -> list[str]:
    """`kubectl port-forward service/torchjob-console <port>:<service port>` in the operator's
    namespace, with the kubeconfig and context given."""
    return port_forward_argv(
        kubectl_path(args.kubectl),
        target_of(args),
        namespace=args.namespace_of_operator,
        address=args.address,
        service=SERVICE,
        local_port=args.port,
        service_port=service_port,
    )


def announcer(open_browser: bool, open_url: Callable[[str], object]) -> Callable[[str], None]:
    """Prints the local URL and, unless told not to, opens it in the browser. The browser is
    started off the event loop: a terminal browser would otherwise stop the forwarding's relay."""

    def announce(url: str) -> None:
        sys.stdout.write(f"Console: {url}\n")
        sys.stdout.flush()
        if open_browser:
            threading.Thread(target=open_url, args=(url,), daemon=True).start()

    return announce


async def console(args: argparse.Namespace) -> int:
    target = target_of(args)
    namespace = args.namespace_of_operator
    inside = in_cluster(target)
    async with connect(target) as cluster:
        try:
            port = await console_port(cluster)
        except CliError as error:
            # A pod's ServiceAccount rarely may read the operator's Services: its URL is known.
            if not (inside and isinstance(error.__cause__, errors.Forbidden)):
                raise
            sys.stderr.write(f"note: could not check that Service {namespace}/{SERVICE} exists\n")
            port = SERVICE_PORT
    if inside:
        sys.stdout.write(f"Console (in the cluster): {in_cluster_url(namespace, port)}\n")
        return EXIT_SUCCEEDED
    argv = forward_argv(args, port)
    if await forward(argv, announcer(not args.no_browser, webbrowser.open)):
        sys.stdout.write("Stopped forwarding.\n")
    return EXIT_SUCCEEDED
