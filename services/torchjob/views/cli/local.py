"""A replica's pod turned into a local process: the training container's command line, environment
and working directory, with every replica's Service address mapped to this machine. Pure.

The pod is the one a cluster would run (rendered for the reconciler, rewritten as the webhook
does); only what a machine without Kubernetes cannot provide is changed:

- `<replica>.<namespace>.svc` (and `.svc.cluster.local`) becomes 127.0.0.1, and the replica's
  Service port (23456) becomes a free local port of that replica's own, in every env value (but
  those read off the pod, such as its name) and argument, including `MASTER_PORT`-style
  variables paired with a mapped `MASTER_ADDR`; an env value that is wholly one of the shorter
  names a pod in the job's namespace resolves to the same Service (`<replica>.<namespace>`, or
  `<replica>` as in Kubeflow's `MASTER_ADDR` and rendezvous endpoint) is that Service's host;
- `$(VAR)` references are expanded as the kubelet expands them; `fieldRef` values are read off the
  pod (`status.podIP` is 127.0.0.1); secrets, config maps and resource fields cannot be read here
  and are reported;
- with torchrun, every replica runs on the same address, so each one's c10d rendezvous would take
  itself for the store's host: replicas other than the master are told they are not
  (`PET_RDZV_CONF=is_host=false`, as their pods conclude from their own address on a cluster), and
  each node's address is 127.0.0.1 (`PET_LOCAL_ADDR`); the same holds for a container that runs
  torchrun itself with a c10d rendezvous endpoint in `PET_RDZV_ENDPOINT` (Kubeflow's elastic
  jobs): the replica the endpoint names is the store's host, the others are told they are not;
- GPUs: each replica sees its own share (`CUDA_VISIBLE_DEVICES`), and procPerNode "gpu" starts
  one process per GPU of that share.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from torchjob.api import queries
from torchjob.api.types import PyTorchTrainingJobSpec, TorchrunConfig
from torchjob.render.topology import DEFAULT_MASTER_PORT
from torchjob.render.wait import WAIT_FOR_MASTER
from torchjob.views.replica_command import training_container_named

LOOPBACK = "127.0.0.1"
CLUSTER_DOMAIN = ".cluster.local"
NPROC_FLAG = "--nproc-per-node"
RDZV_CONF_FLAGS = ("--rdzv-conf", "--rdzv_conf")


class LocalRenderError(ValueError):
    """The pod cannot run as a local process (for example: it has no command to run)."""


@dataclass(frozen=True, slots=True)
class LocalCommand:
    argv: list[str]
    env: dict[str, str]  # the container's environment only; the caller's own is added to it
    working_dir: str | None
    notes: list[str] = field(default_factory=list)  # what could not be reproduced here


def local_command(
    spec: PyTorchTrainingJobSpec,
    pod: dict[str, Any],
    ports: Mapping[str, int],
    *,
    is_master: bool,
    gpus: Sequence[str] | None = None,
    container_name: str | None = None,
) -> LocalCommand:
    """The training container of `pod` as a local process.

    `ports` maps each replica's Service host (`<replica>.<namespace>.svc`) to its local port;
    `gpus` is the replica's share of this machine's GPUs (None: the machine has none);
    `container_name` names the training container (None: `python`, else the first; a Kubeflow
    PyTorchJob's is `pytorch`).
    """
    pod_spec = pod.get("spec") or {}
    index, container = training_container_named(pod_spec, container_name)
    meta = pod.get("metadata") or {}
    name = meta.get("name", "")
    if container is None:
        raise LocalRenderError(f"pod {name} has no container")
    notes: list[str] = []
    from_pod: set[str] = set()
    env = {
        key: value if key in from_pod else canonical_address(value, ports)
        for key, value in _resolve_env(pod, container, notes, from_pod).items()
    }
    localized = {
        key: value if key in from_pod else localize(value, ports) for key, value in env.items()
    }
    _map_paired_ports(env, localized, ports)
    command = [str(part) for part in container.get("command") or []]
    if not command:
        raise LocalRenderError(
            f"pod {name}: spec.containers[{index}].command is empty; the image's entrypoint is "
            "not known here, so the container needs a command to run locally"
        )
    args = [str(part) for part in container.get("args") or []]
    argv = [localize(expand(part, env), ports) for part in [*command, *args]]
    if queries.torchrun_enabled(spec):
        _local_torchrun(localized, argv, is_master=is_master)
    elif "PET_RDZV_ENDPOINT" in env:
        own = f"{name}.{meta.get('namespace', '')}.svc"
        endpoint_host = _mapped_host(env["PET_RDZV_ENDPOINT"].rpartition(":")[0], ports)
        if endpoint_host is not None:
            _local_torchrun(localized, argv, is_master=endpoint_host == own)
    if gpus is not None:
        _share_gpus(spec, localized, argv, gpus)
    notes += _unused_parts(pod_spec, index)
    working_dir = container.get("workingDir")
    return LocalCommand(
        argv, localized, working_dir if isinstance(working_dir, str) else None, notes
    )


# -- addresses -------------------------------------------------------------------------------


def aliases(ports: Mapping[str, int]) -> dict[str, str]:
    """Every name of each Service host (`<replica>.<namespace>.svc`) that resolves to it from a
    pod in its namespace: itself, `<replica>.<namespace>` and `<replica>`; name -> host."""
    names: dict[str, str] = {}
    for host in ports:
        names[host] = host
        if host.endswith(".svc"):
            qualified = host.removesuffix(".svc")
            names.setdefault(qualified, host)
            names.setdefault(qualified.rpartition(".")[0], host)
    return names


def _host_pattern(ports: Mapping[str, int]) -> re.Pattern[str] | None:
    if not ports:
        return None
    hosts = "|".join(re.escape(h) for h in sorted(ports, key=len, reverse=True))
    return re.compile(
        rf"(?<![A-Za-z0-9.-])(?P<host>{hosts})(?:{re.escape(CLUSTER_DOMAIN)})?"
        rf"(?::(?P<port>{DEFAULT_MASTER_PORT}))?(?![A-Za-z0-9-]|\.[A-Za-z0-9])"
    )


def canonical_address(value: str, ports: Mapping[str, int]) -> str:
    """A value that is wholly a replica's shorter name (`<replica>` or `<replica>.<namespace>`,
    with a port or not), as Kubeflow's `MASTER_ADDR` and `PET_RDZV_ENDPOINT` are, spelt as its
    Service host; any other value as it is. Only a whole value is taken for an address: the
    short name inside a path or a longer text may well be something else."""
    host, colon, port = value.rpartition(":") if ":" in value else (value, "", "")
    if colon and not port.isdigit():
        return value
    full = aliases(ports).get(host)
    return value if full is None or full == host else full + colon + port


def localize(text: str, ports: Mapping[str, int]) -> str:
    """Service hosts -> 127.0.0.1; `host:23456` -> `127.0.0.1:<that replica's local port>`."""
    pattern = _host_pattern(ports)
    if pattern is None:
        return text

    def replace(match: re.Match[str]) -> str:
        if match.group("port"):
            return f"{LOOPBACK}:{ports[match.group('host')]}"
        return LOOPBACK

    return pattern.sub(replace, text)


def _mapped_host(value: str, ports: Mapping[str, int]) -> str | None:
    """The Service host `value` names (any of its names), if it is one of `ports`."""
    return aliases(ports).get(value.removesuffix(CLUSTER_DOMAIN))


def _map_paired_ports(
    original: Mapping[str, str], localized: dict[str, str], ports: Mapping[str, int]
) -> None:
    """`X_PORT=23456` next to `X_ADDR=<replica host>` is that replica's Service port."""
    for key, value in original.items():
        if not key.endswith("_PORT") or value != str(DEFAULT_MASTER_PORT):
            continue
        host = _mapped_host(original.get(key.removesuffix("_PORT") + "_ADDR", ""), ports)
        if host is not None:
            localized[key] = str(ports[host])


# -- environment -----------------------------------------------------------------------------


def _resolve_env(
    pod: dict[str, Any], container: dict[str, Any], notes: list[str], from_pod: set[str]
) -> dict[str, str]:
    """The container's env in order, each value expanded against the ones before it; the names
    of those read off the pod are added to `from_pod`."""
    env: dict[str, str] = {}
    for entry in container.get("env") or []:
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            continue
        key = entry["name"]
        if "value" in entry or "valueFrom" not in entry:
            env[key] = expand(str(entry.get("value") or ""), env)
            continue
        value = _value_from(pod, entry.get("valueFrom") or {})
        if value is None:
            notes.append(f"env {key} is read from {_source(entry)}, which is not available here")
        else:
            env[key] = value
            from_pod.add(key)
    if container.get("envFrom"):
        notes.append("envFrom (config maps, secrets) is not available here")
    return env


def _value_from(pod: dict[str, Any], source: dict[str, Any]) -> str | None:
    field_ref = source.get("fieldRef")
    if not isinstance(field_ref, dict):
        return None
    path = str(field_ref.get("fieldPath") or "")
    meta = pod.get("metadata") or {}
    simple = {
        "metadata.name": meta.get("name"),
        "metadata.namespace": meta.get("namespace"),
        "metadata.uid": meta.get("uid"),
        "spec.serviceAccountName": (pod.get("spec") or {}).get("serviceAccountName", "default"),
        "spec.nodeName": "localhost",
        "status.podIP": LOOPBACK,
        "status.podIPs": LOOPBACK,
        "status.hostIP": LOOPBACK,
        "status.hostIPs": LOOPBACK,
    }
    if path in simple:
        value = simple[path]
        return str(value) if value is not None else ""
    keyed = re.fullmatch(r"metadata\.(labels|annotations)\['([^']*)'\]", path)
    if keyed:
        return str((meta.get(keyed.group(1)) or {}).get(keyed.group(2), ""))
    return None


def _source(entry: dict[str, Any]) -> str:
    source = entry.get("valueFrom") or {}
    return next(iter(source), "valueFrom") if isinstance(source, dict) else "valueFrom"


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes' `$(VAR)` expansion: defined variables are replaced, `$$` is a literal `$`,
    anything else is left as written."""
    out: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char != "$" or i + 1 == len(text):
            out.append(char)
            i += 1
            continue
        following = text[i + 1]
        if following == "$":
            out.append("$")
            i += 2
        elif following == "(" and (end := text.find(")", i + 2)) != -1:
            name = text[i + 2 : end]
            out.append(env[name] if name in env else text[i : end + 1])
            i = end + 1
        else:
            out.append(char)
            i += 1
    return "".join(out)


# -- torchrun and GPUs ------------------------------------------------------------------------


def _local_torchrun(env: dict[str, str], argv: list[str], *, is_master: bool) -> None:
    env.setdefault("PET_LOCAL_ADDR", LOOPBACK)
    user_conf = "PET_RDZV_CONF" in env or any(a.startswith(RDZV_CONF_FLAGS) for a in argv)
    if not is_master and env.get("PET_RDZV_BACKEND") == "c10d" and not user_conf:
        env["PET_RDZV_CONF"] = "is_host=false"


def _share_gpus(
    spec: PyTorchTrainingJobSpec, env: dict[str, str], argv: list[str], gpus: Sequence[str]
) -> None:
    env.setdefault("CUDA_VISIBLE_DEVICES", ",".join(gpus))
    config = spec.torchrun_config or TorchrunConfig()
    if not queries.torchrun_enabled(spec) or config.proc_per_node != "gpu":
        return
    count = str(len(gpus))
    env["PET_NPROC_PER_NODE"] = count
    for position, arg in enumerate(argv):
        if arg.startswith(NPROC_FLAG + "="):
            argv[position] = f"{NPROC_FLAG}={count}"
            break


def gpu_shares(limits: Sequence[int], available: Sequence[str]) -> list[list[str]]:
    """Each replica's GPUs, in rank order, from its nvidia.com/gpu limit: its full limit when this
    machine has enough for every replica, else an equal share of what there is. A replica without
    a GPU limit gets none, as on a cluster."""
    wanting = [limit for limit in limits if limit > 0]
    if not wanting:
        return [[] for _ in limits]
    if sum(wanting) <= len(available):
        sizes = list(limits)
    else:
        equal = len(available) // len(wanting)
        if equal == 0:
            raise LocalRenderError(
                f"{len(wanting)} replicas ask for GPUs and this machine has {len(available)}: "
                "each needs at least one"
            )
        sizes = [min(limit, equal) for limit in limits]
    shares: list[list[str]] = []
    start = 0
    for size in sizes:
        shares.append(list(available[start : start + size]))
        start += size
    return shares


def _unused_parts(pod_spec: dict[str, Any], training: int) -> list[str]:
    notes = []
    others = [
        str(c.get("name"))
        for i, c in enumerate(pod_spec.get("containers") or [])
        if i != training and isinstance(c, dict)
    ]
    if others:
        notes.append(f"only the training container runs here; not run: {', '.join(others)}")
    # Waiting for the master's name means nothing here: every replica's address is loopback.
    if any(c.get("name") != WAIT_FOR_MASTER for c in pod_spec.get("initContainers") or []):
        notes.append("init containers are not run here")
    return notes
