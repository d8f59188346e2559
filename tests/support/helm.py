"""The chart as tests use it: helm (installed by `make helm`), rendering, and the rendered
Deployments turned back into the command line and environment of their container."""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from .controlplane import REPO_ROOT, ControlPlane, kube_version
from .processes import ServiceProcess

CHART = REPO_ROOT / "charts" / "torchjob"
# The values variants the chart is rendered, linted and dry-run with.
CI_VALUES = sorted((CHART / "ci").glob("*-values.yaml"))
INSTALL_SCRIPT = REPO_ROOT / "hack" / "install-helm.sh"

Manifest = dict[str, Any]


class HelmError(subprocess.CalledProcessError):
    """A failed helm call whose message carries helm's own explanation."""

    def __str__(self) -> str:
        return f"{super().__str__()}\n{self.stderr}"


@functools.cache
def helm_binary() -> Path:
    """The cached helm, found where the install script (the one source of its version) puts it."""
    path = Path(
        subprocess.run(
            ["bash", str(INSTALL_SCRIPT), "print-path"], capture_output=True, text=True, check=True
        ).stdout.strip()
    )
    if not os.access(path, os.X_OK):
        raise FileNotFoundError(f"helm not found at {path}: run `make helm`")
    return path


def helm(*args: str, check: bool = True, env: Mapping[str, str] | None = None) -> Any:
    """Run helm with its caches and configuration in a throwaway place, not the user's home."""
    home = Path(os.environ.get("TMPDIR", "/tmp")) / f"torchjob-helm-{os.getuid()}"
    isolated = {
        "HELM_CACHE_HOME": str(home / "cache"),
        "HELM_CONFIG_HOME": str(home / "config"),
        "HELM_DATA_HOME": str(home / "data"),
    }
    argv = [str(helm_binary()), *args]
    result = subprocess.run(
        argv, capture_output=True, text=True, env={**os.environ, **isolated, **(env or {})}
    )
    if check and result.returncode != 0:
        raise HelmError(result.returncode, argv, result.stdout, result.stderr)
    return result


def values_args(
    values_files: Iterable[Path] = (), settings: Mapping[str, object] | None = None
) -> list[str]:
    args: list[str] = []
    for path in values_files:
        args += ["--values", str(path)]
    for key, value in (settings or {}).items():
        args += ["--set-json", f"{key}={json.dumps(value)}"]
    return args


def template(
    *,
    release: str = "torchjob",
    namespace: str = "torchjob-system",
    values_files: Iterable[Path] = (),
    settings: Mapping[str, object] | None = None,
    include_crds: bool = True,
) -> list[Manifest]:
    """The chart rendered by `helm template`, one dict per object."""
    args = ["template", release, str(CHART), "--namespace", namespace]
    # What helm assumes about the cluster: the version the test control plane runs.
    args += ["--kube-version", kube_version()]
    if include_crds:
        args.append("--include-crds")
    text = helm(*args, *values_args(values_files, settings)).stdout
    return [doc for doc in yaml.safe_load_all(text) if doc]


def render_with(
    tmp_path: Path,
    name: str,
    text: str,
    settings: Mapping[str, object],
    *,
    release: str = "torchjob",
    namespace: str = "torchjob-system",
) -> Any:
    """`helm template` of a copy of the chart with one more template (not checked: the caller
    reads helm's exit status)."""
    chart = tmp_path / "chart"
    shutil.copytree(CHART, chart, symlinks=False)
    (chart / "templates" / name).write_text(text)
    return helm(
        "template",
        release,
        str(chart),
        "--namespace",
        namespace,
        *values_args(settings=settings),
        check=False,
    )


def notes(
    tmp_path: Path,
    settings: Mapping[str, object],
    *,
    release: str = "torchjob",
    namespace: str = "torchjob-system",
) -> str:
    """NOTES.txt as `helm install` prints it (rendered here as a template of a chart copy)."""
    body = (CHART / "templates" / "NOTES.txt").read_text()
    text = '{{- define "test.notes" }}' + body + "{{- end }}\n"
    text += 'kind: Notes\ntext: {{ include "test.notes" . | toJson }}\n'
    result = render_with(
        tmp_path, "notes.yaml", text, settings, release=release, namespace=namespace
    )
    if result.returncode != 0:
        raise HelmError(result.returncode, "helm template", result.stdout, result.stderr)
    (doc,) = [d for d in yaml.safe_load_all(result.stdout) if d and d.get("kind") == "Notes"]
    return str(doc["text"])


def dump(manifests: Iterable[Manifest]) -> str:
    return yaml.safe_dump_all(list(manifests), sort_keys=False)


def find(manifests: Iterable[Manifest], kind: str, name: str | None = None) -> list[Manifest]:
    return [
        m
        for m in manifests
        if m["kind"] == kind and (name is None or m["metadata"]["name"] == name)
    ]


def one(manifests: Iterable[Manifest], kind: str, name: str | None = None) -> Manifest:
    found = find(manifests, kind, name)
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def component_objects(manifests: Iterable[Manifest], name: str) -> list[Manifest]:
    """Every object belonging to component `name` (webhook, reconciler, housekeeper)."""
    return [
        m
        for m in manifests
        if (m["metadata"].get("labels") or {}).get("app.kubernetes.io/component") == name
    ]


def component(manifests: Iterable[Manifest], kind: str, name: str) -> Manifest:
    """The object of `kind` belonging to component `name`."""
    found = [m for m in component_objects(manifests, name) if m["kind"] == kind]
    assert len(found) == 1, f"expected one {kind} of {name}, found {len(found)}"
    return found[0]


@dataclass(frozen=True)
class ContainerCommand:
    """A Deployment's container as a local process would run it: `python -m <module> <args>`."""

    module: str
    args: list[str]
    env: dict[str, str]
    service_account: str
    probe_port: int

    def arg(self, flag: str) -> str:
        return self.args[self.args.index(flag) + 1]


def container_command(deployment: Manifest, pod_name: str) -> ContainerCommand:
    """The command line and environment of the Deployment's only container, with the downward
    API's fields resolved as the kubelet would for a pod called `pod_name`."""
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    command = container["command"]
    assert command[:2] == ["python", "-m"], f"unexpected command {command}"
    fields = {"metadata.name": pod_name, "metadata.namespace": deployment["metadata"]["namespace"]}
    env: dict[str, str] = {}
    for var in container.get("env", []):
        if "value" in var:
            env[var["name"]] = str(var["value"])
        else:
            env[var["name"]] = fields[var["valueFrom"]["fieldRef"]["fieldPath"]]
    ports = {p["name"]: int(p["containerPort"]) for p in container["ports"]}
    return ContainerCommand(
        module=command[2],
        args=[str(a) for a in container.get("args", [])],
        env=env,
        service_account=pod["serviceAccountName"],
        probe_port=ports[container["readinessProbe"]["httpGet"]["port"]],
    )


def rules_of(role: Manifest) -> list[dict[str, Any]]:
    return list(role.get("rules") or [])


def grants(
    rules: Sequence[Mapping[str, Any]], group: str, resource: str, verb: str, name: str = ""
) -> bool:
    """Whether RBAC `rules` allow `verb` on `resource` (optionally the object called `name`)."""
    for rule in rules:
        if group not in rule.get("apiGroups", []) or resource not in rule.get("resources", []):
            continue
        if verb not in rule.get("verbs", []):
            continue
        names = rule.get("resourceNames")
        if not names or name in names:
            return True
    return False


def run_as_deployed(
    control_plane: ControlPlane,
    deployment: Manifest,
    pod_name: str | None = None,
    extra_args: Sequence[str] = (),
) -> ServiceProcess:
    """Start the Deployment's container as a local process, with exactly its arguments (and
    `extra_args` after them) and environment, authenticated with a token of its own
    ServiceAccount; ready when /readyz is."""
    namespace = deployment["metadata"]["namespace"]
    command = container_command(deployment, pod_name or f"{deployment['metadata']['name']}-local")
    kubeconfig = control_plane.issue_service_account_kubeconfig(namespace, command.service_account)
    # In the cluster the token would be mounted where the in-cluster configuration finds it;
    # here the kubeconfig carries it.
    env = {**command.env, "KUBECONFIG": str(kubeconfig)}
    process = ServiceProcess(
        command.module, [*command.args, *extra_args], command.probe_port, env=env
    )
    try:
        process.start().wait_ready()
    except BaseException:
        process.close()
        raise
    return process
