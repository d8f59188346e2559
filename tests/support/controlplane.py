"""A real Kubernetes control plane on loopback: etcd, kube-apiserver and kube-controller-manager,
as built by hack/build-control-plane.sh. No kubelet and no scheduler: pods are stored, never run."""

from __future__ import annotations

import atexit
import base64
import contextlib
import functools
import http.client
import itertools
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml

from .eventually import eventually_sync
from .pki import (
    issue_client_cert,
    issue_serving_cert,
    new_ca,
    new_service_account_key,
    write_cert,
    write_private_key,
    write_public_key,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO_ROOT / "hack" / "build-control-plane.sh"

DEFAULT_CONTROLLERS = (
    "garbage-collector-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "namespace-controller",
    "deployment-controller",
    "replicaset-controller",
    # Keeps ResourceQuota usage, so that a quota refuses exactly what exceeds it.
    "resourcequota-controller",
    # Fills the aggregated built-in roles (admin, edit, view); they have no rules without it.
    "clusterrole-aggregation-controller",
)
ETCD_MEMBER = "torchjob-test"
SERVICE_CLUSTER_IP_RANGE = "10.0.0.0/24"
# kube-apiserver gives the in-cluster `kubernetes` Service the first address of the range, and
# in-cluster clients reach it by these names, so the serving certificate must cover them.
KUBERNETES_SERVICE_HOSTS = ("10.0.0.1", "kubernetes", "kubernetes.default.svc")
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc"
FRONT_PROXY_CLIENT = "front-proxy-client"  # the aggregation layer's client, as kubeadm names it
STARTUP_TIMEOUT = 120.0
STOP_GRACE = 5.0
POLL_INTERVAL = 0.1
LOG_TAIL_LINES = 40


_PROBES = itertools.count()


class ControlPlaneError(RuntimeError):
    pass


class KubectlError(subprocess.CalledProcessError):
    """A failed kubectl call whose message carries kubectl's own explanation."""

    def __str__(self) -> str:
        return f"{super().__str__()}\n{self.stderr}"


@dataclass(frozen=True)
class Binaries:
    etcd: Path
    kube_apiserver: Path
    kube_controller_manager: Path
    kube_scheduler: Path
    kubectl: Path

    @classmethod
    def locate(cls) -> Binaries:
        """The cached binaries, found where the build script (the one source of versions) puts
        them; it honours TORCHJOB_CACHE from the inherited environment."""
        dirs = _build_cache_dirs()
        kube_dir = dirs["KUBE_DIR"]
        return cls(
            etcd=_require_binary(dirs["ETCD_DIR"], "etcd"),
            kube_apiserver=_require_binary(kube_dir, "kube-apiserver"),
            kube_controller_manager=_require_binary(kube_dir, "kube-controller-manager"),
            kube_scheduler=_require_binary(kube_dir, "kube-scheduler"),
            kubectl=_require_binary(kube_dir, "kubectl"),
        )


@functools.cache
def kube_version() -> str:
    """The Kubernetes version the control plane is built at, from the build script."""
    return subprocess.run(
        ["bash", str(BUILD_SCRIPT), "print-version"], capture_output=True, text=True, check=True
    ).stdout.strip()


def _build_cache_dirs() -> dict[str, Path]:
    output = subprocess.run(
        ["bash", str(BUILD_SCRIPT), "print-dirs"], capture_output=True, text=True, check=True
    ).stdout
    pairs = (line.partition("=") for line in output.splitlines())
    return {key: Path(value) for key, _, value in pairs if value}


def _require_binary(directory: Path, name: str) -> Path:
    path = directory / name
    if not os.access(path, os.X_OK):
        raise ControlPlaneError(f"{name} not found in {directory}: run `make cluster`")
    return path


def free_port() -> int:
    """A loopback port nobody listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def write_to_stderr(line: str) -> None:
    stream = sys.__stderr__ or sys.stderr
    print(line, file=stream, flush=True)


class _Process:
    """One control-plane binary: its command line, its log file and, while it runs, its Popen."""

    def __init__(self, name: str, argv: list[str], log_path: Path) -> None:
        self.name = name
        self.argv = argv
        self.log_path = log_path
        self._popen: subprocess.Popen[bytes] | None = None

    @property
    def running(self) -> bool:
        return self._popen is not None and self._popen.poll() is None

    @property
    def pid(self) -> int | None:
        return self._popen.pid if self.running and self._popen else None

    def exit_code(self) -> int | None:
        return None if self._popen is None else self._popen.poll()

    def start(self) -> None:
        if self.running:
            raise ControlPlaneError(f"{self.name} is already running")
        # Appending keeps the log of an earlier run of the same process (a restart) readable.
        with self.log_path.open("ab") as log:
            self._popen = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def send_terminate(self) -> None:
        # Only while unreaped: after wait() the pid (and so the group id) may belong to another.
        if self._popen is not None and self._popen.poll() is None:
            _signal_group(self._popen.pid, signal.SIGTERM)

    def wait_or_kill(self, deadline: float) -> None:
        if self._popen is None:
            return
        try:
            self._popen.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            _signal_group(self._popen.pid, signal.SIGKILL)
            self._popen.wait()

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return "(no log written)"
        return "\n".join(text.splitlines()[-lines:])


def _signal_group(pgid: int, signum: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signum)


def _stop_all(processes: Sequence[_Process], grace: float = STOP_GRACE) -> None:
    # Terminate all first and then wait, so their graceful shutdowns overlap.
    for process in processes:
        process.send_terminate()
    deadline = time.monotonic() + grace
    for process in processes:
        process.wait_or_kill(deadline)


def _write_kubeconfig(
    path: Path, *, server: str, ca_file: Path, user: str, credentials: dict[str, str]
) -> Path:
    """A kubeconfig for `user`, who authenticates with `credentials` (a client certificate and
    key, or a token)."""
    cluster, context = "torchjob-test", f"{user}@torchjob-test"
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": cluster, "cluster": {"server": server, "certificate-authority": str(ca_file)}}
        ],
        "users": [{"name": user, "user": credentials}],
        "contexts": [{"name": context, "context": {"cluster": cluster, "user": user}}],
        "current-context": context,
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


_live_control_planes: set[ControlPlane] = set()


def control_plane_pids() -> frozenset[int]:
    """Pids of every running control-plane process of this interpreter."""
    return frozenset(pid for plane in _live_control_planes for pid in plane.pids())


class ControlPlane:
    """etcd, kube-apiserver and kube-controller-manager on random loopback ports, with all data,
    certificates, logs and kubeconfigs in one fresh temporary directory removed by stop()."""

    def __init__(
        self,
        binaries: Binaries | None = None,
        *,
        controllers: Sequence[str] = DEFAULT_CONTROLLERS,
        announce: Callable[[str], None] = write_to_stderr,
        startup_timeout: float = STARTUP_TIMEOUT,
        extra_apiserver_args: Sequence[str] = (),
        extra_controller_manager_args: Sequence[str] = (),
    ) -> None:
        self.binaries = binaries or Binaries.locate()
        self._announce = announce
        self._startup_timeout = startup_timeout
        self._stopped = False
        self.dir = Path(tempfile.mkdtemp(prefix="torchjob-control-plane-"))
        try:
            self._prepare(controllers)
            self._apiserver.argv.extend(extra_apiserver_args)
            self._controller_manager.argv.extend(extra_controller_manager_args)
        except BaseException:
            shutil.rmtree(self.dir, ignore_errors=True)
            raise
        # stop() also runs at interpreter exit, for sessions that end without calling it.
        atexit.register(self.stop)
        _live_control_planes.add(self)

    def _prepare(self, controllers: Sequence[str]) -> None:
        """Ports, certificates, kubeconfigs and command lines: everything but the processes."""
        self._etcd_client_url = f"http://127.0.0.1:{free_port()}"
        self._etcd_peer_url = f"http://127.0.0.1:{free_port()}"
        self.server = f"https://127.0.0.1:{free_port()}"
        self._ca = new_ca()
        self._write_pki()
        self.kubeconfig = self._write_client_kubeconfig("admin", "admin", ["system:masters"])
        self._controller_manager_kubeconfig = self._write_client_kubeconfig(
            "kube-controller-manager", "system:kube-controller-manager", []
        )
        self._user_serial = itertools.count(1)
        self._http = self._admin_https_opener()

        self._schedulers: list[_Process] = []
        self._etcd = _Process("etcd", self._etcd_argv(), self.dir / "etcd.log")
        self._apiserver = _Process(
            "kube-apiserver", self._apiserver_argv(), self.dir / "kube-apiserver.log"
        )
        self._controller_manager = _Process(
            "kube-controller-manager",
            self._controller_manager_argv(controllers),
            self.dir / "kube-controller-manager.log",
        )

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        """Start all three and return once the API is ready and the controllers are working."""
        started = time.monotonic()
        try:
            self._launch(self._etcd, self._etcd_healthy)
            self._launch(self._apiserver, self._apiserver_ready)
            # The serviceaccount controller creating `default` proves the controller manager
            # is connected and running its controllers.
            self._launch(self._controller_manager, self._default_service_account_exists)
        except BaseException:
            self.stop()
            raise
        elapsed = time.monotonic() - started
        self._announce(
            f"control plane ready in {elapsed:.1f}s (etcd, kube-apiserver, kube-controller-manager)"
        )

    def stop(self) -> None:
        """Stop every process (SIGTERM, then SIGKILL after a grace period) and remove the
        directory. Safe to call more than once."""
        if self._stopped:
            return
        self._stopped = True
        atexit.unregister(self.stop)
        _live_control_planes.discard(self)
        _stop_all([*self._schedulers, self._controller_manager, self._apiserver])
        # Only after its clients are gone: etcd's graceful stop waits for open watch streams,
        # and kube-apiserver's shutdown waits for etcd, so stopping both at once stalls.
        _stop_all([self._etcd])
        shutil.rmtree(self.dir, ignore_errors=True)

    def start_scheduler(
        self,
        scheduler_name: str,
        *extra_args: str,
        client_limits: tuple[float, int] | None = None,
        nodes_to_score: int | None = None,
    ) -> None:
        """kube-scheduler with one profile, placing only the pods that name `scheduler_name`
        (so the pods of other tests stay unscheduled, as with no scheduler); stopped with the
        control plane. Ready once it serves its health check. `client_limits` (qps, burst)
        replace its client's default of 50 and 100 (with a config file, flags cannot);
        `nodes_to_score` is its percentageOfNodesToScore (by default adaptive)."""
        connection: dict[str, object] = {"kubeconfig": str(self.kubeconfig)}
        if client_limits is not None:
            connection |= {"qps": client_limits[0], "burst": client_limits[1]}
        settings: dict[str, object] = {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "clientConnection": connection,
            "leaderElection": {"leaderElect": False},
            "profiles": [{"schedulerName": scheduler_name}],
        }
        if nodes_to_score is not None:
            settings["percentageOfNodesToScore"] = nodes_to_score
        config = self.dir / f"kube-scheduler-{scheduler_name}.yaml"
        config.write_text(yaml.safe_dump(settings))
        port = free_port()
        process = _Process(
            f"kube-scheduler-{scheduler_name}",
            [
                str(self.binaries.kube_scheduler),
                f"--config={config}",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
                f"--cert-dir={self.dir / 'kube-scheduler-certs'}",
                *extra_args,
                "--v=2",
            ],
            self.dir / f"kube-scheduler-{scheduler_name}.log",
        )
        self._schedulers.append(process)
        self._launch(process, lambda: _self_signed_ok(f"https://127.0.0.1:{port}/healthz"))

    def stop_apiserver(self) -> None:
        _stop_all([self._apiserver])

    def start_apiserver(self) -> None:
        """Start kube-apiserver again with the same flags, on the same port, and return once the
        controller-manager acts again: after a restart (and above all after a compaction) its
        watches list again with a backoff of their own, and a later test's namespace would wait
        for its default ServiceAccount meanwhile."""
        if self._stopped:
            raise ControlPlaneError("the control plane has been stopped")
        self._launch(self._apiserver, self._apiserver_ready)
        self._wait_controllers_act()

    def _wait_controllers_act(self) -> None:
        probe = f"controllers-probe-{next(_PROBES)}"
        self.kubectl("create", "namespace", probe)

        def account_made() -> bool:
            found = self.kubectl("get", "serviceaccount", "default", "-n", probe, check=False)
            return found.returncode == 0

        try:
            eventually_sync(account_made, "the controller-manager acting again", timeout=300)
        finally:
            self.kubectl("delete", "namespace", probe, "--wait=false", check=False)

    def compact_etcd(self) -> int:
        """Write a key of our own to etcd and compact its history up to that write; returns the
        revision. No client of the apiserver can have seen this revision, so every
        resourceVersion a client holds is then too old to watch from: 410 Gone."""
        marker = base64.b64encode(b"/torchjob-test/compaction-marker").decode()
        value = base64.b64encode(str(time.time()).encode()).decode()
        put = self._etcd_call("/v3/kv/put", {"key": marker, "value": value})
        revision = int(put["header"]["revision"])
        self._etcd_call("/v3/kv/compaction", {"revision": str(revision), "physical": True})
        return revision

    def _etcd_call(self, path: str, body: dict[str, object]) -> dict[str, Any]:
        """A call to etcd's JSON gateway for its v3 API."""
        request = urllib.request.Request(
            f"{self._etcd_client_url}{path}",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(request, timeout=10) as response:
            answer: dict[str, Any] = json.loads(response.read())
            return answer

    def pids(self) -> set[int]:
        processes = (self._etcd, self._apiserver, self._controller_manager, *self._schedulers)
        return {process.pid for process in processes if process.pid is not None}

    def __enter__(self) -> ControlPlane:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    # -- clients ---------------------------------------------------------------------------------

    @property
    def ca_file(self) -> Path:
        return self._pki_dir / "ca.crt"

    def kubectl(
        self,
        *args: str,
        input: str | None = None,
        check: bool = True,
        as_user: str | None = None,
        timeout: float = 60.0,
    ) -> subprocess.CompletedProcess[str]:
        """Run the cached kubectl as admin (or impersonating `as_user`); pass `--kubeconfig` in
        `args` to act as another user instead."""
        argv = [str(self.binaries.kubectl), *args]
        if as_user is not None:
            argv.append(f"--as={as_user}")
        # The discovery cache goes in our directory instead of the user's ~/.kube.
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig), "KUBECACHEDIR": str(self._cache)}
        result = subprocess.run(
            argv, input=input, capture_output=True, text=True, env=env, timeout=timeout
        )
        if check and result.returncode != 0:
            raise KubectlError(result.returncode, argv, result.stdout, result.stderr)
        return result

    def issue_kubeconfig(self, user: str, groups: Sequence[str] = ()) -> Path:
        """A kubeconfig authenticating as `user` in `groups` with a client certificate from the
        cluster CA. It grants nothing by itself: authorization is up to RBAC."""
        directory = self._user_dir(user)
        return self._write_client_kubeconfig("client", user, groups, directory)

    def issue_service_account_kubeconfig(
        self, namespace: str, service_account: str, expiration_seconds: int = 3600
    ) -> Path:
        """A kubeconfig carrying a token of the ServiceAccount (TokenRequest, as a kubelet gets one
        for a pod), so a process outside the cluster authenticates exactly as the pod would."""
        token = self.kubectl(
            "create",
            "token",
            service_account,
            "--namespace",
            namespace,
            f"--duration={expiration_seconds}s",
        ).stdout.strip()
        user = f"system:serviceaccount:{namespace}:{service_account}"
        path = self._user_dir(user) / "token.kubeconfig"
        path.touch(mode=0o600)
        return _write_kubeconfig(
            path, server=self.server, ca_file=self.ca_file, user=user, credentials={"token": token}
        )

    def _user_dir(self, user: str) -> Path:
        directory = self.dir / "users" / f"{next(self._user_serial)}-{_file_safe(user)}"
        directory.mkdir(parents=True)
        return directory

    # -- set-up ----------------------------------------------------------------------------------

    @property
    def _pki_dir(self) -> Path:
        return self.dir / "pki"

    @property
    def _cache(self) -> Path:
        return self.dir / "kubectl-cache"

    def _write_pki(self) -> None:
        self._pki_dir.mkdir()
        self._ca.write(self.ca_file, self._pki_dir / "ca.key")
        serving = issue_serving_cert(self._ca, "kube-apiserver", KUBERNETES_SERVICE_HOSTS)
        serving.write(self._pki_dir / "apiserver.crt", self._pki_dir / "apiserver.key")
        service_account_key = new_service_account_key()
        write_private_key(self._pki_dir / "sa.key", service_account_key)
        write_public_key(self._pki_dir / "sa.pub", service_account_key)
        # The aggregation layer's: the apiserver proxies an aggregated API's requests (Kueue's
        # visibility API) with this client certificate, and the API server behind trusts the
        # user it names in headers because of it.
        front_proxy = new_ca("front-proxy-ca")
        write_cert(self._pki_dir / "front-proxy-ca.crt", front_proxy.cert)
        client = issue_client_cert(front_proxy, FRONT_PROXY_CLIENT)
        client.write(
            self._pki_dir / "front-proxy-client.crt", self._pki_dir / "front-proxy-client.key"
        )

    def _write_client_kubeconfig(
        self, name: str, user: str, groups: Sequence[str], directory: Path | None = None
    ) -> Path:
        directory = directory or self._pki_dir
        cert_file, key_file = directory / f"{name}.crt", directory / f"{name}.key"
        issue_client_cert(self._ca, user, groups).write(cert_file, key_file)
        return _write_kubeconfig(
            directory / f"{name}.kubeconfig",
            server=self.server,
            ca_file=self.ca_file,
            user=user,
            credentials={"client-certificate": str(cert_file), "client-key": str(key_file)},
        )

    def _admin_https_opener(self) -> urllib.request.OpenerDirector:
        context = ssl.create_default_context(cafile=str(self.ca_file))
        context.load_cert_chain(self._pki_dir / "admin.crt", self._pki_dir / "admin.key")
        # An empty ProxyHandler: a proxy from the environment must not intercept loopback.
        return urllib.request.build_opener(
            urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context)
        )

    def _etcd_argv(self) -> list[str]:
        return [
            str(self.binaries.etcd),
            f"--name={ETCD_MEMBER}",
            f"--data-dir={self.dir / 'etcd'}",
            f"--listen-client-urls={self._etcd_client_url}",
            f"--advertise-client-urls={self._etcd_client_url}",
            f"--listen-peer-urls={self._etcd_peer_url}",
            f"--initial-advertise-peer-urls={self._etcd_peer_url}",
            f"--initial-cluster={ETCD_MEMBER}={self._etcd_peer_url}",
            "--initial-cluster-state=new",
            # Durability is worthless for throwaway data and fsync dominates write latency.
            "--unsafe-no-fsync",
            "--log-level=warn",
        ]

    def _apiserver_argv(self) -> list[str]:
        pki, port = self._pki_dir, self.server.rsplit(":", 1)[1]
        return [
            str(self.binaries.kube_apiserver),
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            # The endpoint reconciler refuses a loopback advertise address, and with no nodes
            # nothing in the cluster could use the `kubernetes` Service's endpoints anyway.
            "--endpoint-reconciler-type=none",
            f"--secure-port={port}",
            f"--etcd-servers={self._etcd_client_url}",
            f"--cert-dir={self.dir / 'kube-apiserver-certs'}",
            f"--tls-cert-file={pki / 'apiserver.crt'}",
            f"--tls-private-key-file={pki / 'apiserver.key'}",
            f"--client-ca-file={self.ca_file}",
            "--authorization-mode=Node,RBAC",
            f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
            "--allow-privileged=true",
            f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            f"--api-audiences={SERVICE_ACCOUNT_ISSUER}",
            # The aggregation layer, routing to an aggregated API server's endpoints (there is no
            # kube-proxy to route to its Service).
            f"--requestheader-client-ca-file={pki / 'front-proxy-ca.crt'}",
            f"--requestheader-allowed-names={FRONT_PROXY_CLIENT}",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            f"--proxy-client-cert-file={pki / 'front-proxy-client.crt'}",
            f"--proxy-client-key-file={pki / 'front-proxy-client.key'}",
            "--enable-aggregator-routing=true",
            # Without a grace period for watches, shutdown waits a minute for clients to close
            # their watches; with one, kube-apiserver closes them itself and exits in seconds.
            "--shutdown-watch-termination-grace-period=1s",
            "--v=1",
        ]

    def _controller_manager_argv(self, controllers: Sequence[str]) -> list[str]:
        pki = self._pki_dir
        return [
            str(self.binaries.kube_controller_manager),
            f"--kubeconfig={self._controller_manager_kubeconfig}",
            "--leader-elect=false",
            f"--controllers={','.join(controllers)}",
            f"--service-account-private-key-file={pki / 'sa.key'}",
            f"--root-ca-file={self.ca_file}",
            "--use-service-account-credentials=true",
            "--bind-address=127.0.0.1",
            f"--secure-port={free_port()}",
            f"--cert-dir={self.dir / 'kube-controller-manager-certs'}",
            "--v=1",
        ]

    # -- readiness -------------------------------------------------------------------------------

    def _launch(self, process: _Process, ready: Callable[[], bool]) -> None:
        process.start()
        deadline = time.monotonic() + self._startup_timeout
        while not ready():
            code = process.exit_code()
            if code is not None:
                raise self._start_failure(process, f"exited with code {code}")
            if time.monotonic() > deadline:
                raise self._start_failure(process, f"not ready after {self._startup_timeout:.0f}s")
            time.sleep(POLL_INTERVAL)

    @staticmethod
    def _start_failure(process: _Process, what: str) -> ControlPlaneError:
        return ControlPlaneError(
            f"{process.name} {what}; last lines of {process.log_path}:\n{process.log_tail()}"
        )

    def _etcd_healthy(self) -> bool:
        return self._get_status(f"{self._etcd_client_url}/health") == 200

    def _apiserver_ready(self) -> bool:
        return self._get_status(f"{self.server}/readyz") == 200

    def _default_service_account_exists(self) -> bool:
        path = "/api/v1/namespaces/default/serviceaccounts/default"
        return self._get_status(f"{self.server}{path}") == 200

    def _get_status(self, url: str) -> int | None:
        """The HTTP status of GET `url` as admin, or None while nothing answers."""
        try:
            with self._http.open(url, timeout=2) as response:
                status: int = response.status
                return status
        except urllib.error.HTTPError as error:
            return error.code
        except (OSError, http.client.HTTPException):
            return None


def _self_signed_ok(url: str) -> bool:
    """GET `url` answers 200, from a server whose certificate it made itself (kube-scheduler's
    serving certificate is not signed by the cluster's CA; health checks carry no secret)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(url, timeout=2, context=context) as response:
            return bool(response.status == 200)
    except (OSError, http.client.HTTPException):
        return False


def _file_safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)
