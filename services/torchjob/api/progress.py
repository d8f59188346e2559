"""Progress reporting: the names a training process and the endpoint agree on. Pure.

torchjob speaks Kubeflow Trainer's protocol (its `TrainJobStatus` feature): every training
container gets three variables, the URL of its job's status endpoint and the paths of a CA
certificate and of a ServiceAccount token whose audience names the job; the process POSTs
`{"trainerStatus": {...}}` there with the token as a bearer token, and the endpoint writes it into
`status.trainerStatus`. Hugging Face's Trainer and the Kubeflow SDK's `update_trainjob_status`
report this way whenever the URL variable is set.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from torchjob.api.job_api import JOB_APIS, JobApi
from torchjob.api.model import INT_BOUNDS, Limits, Model
from torchjob.api.types import GROUP, Metric, TrainerStatus

ENV_URL: Final = "KUBEFLOW_TRAINER_SERVER_URL"
ENV_CA_CERT: Final = "KUBEFLOW_TRAINER_SERVER_CA_CERT"  # a file path
ENV_TOKEN: Final = "KUBEFLOW_TRAINER_SERVER_TOKEN"  # a file path
ENV_NAMES: Final = (ENV_URL, ENV_CA_CERT, ENV_TOKEN)

# The projected volume that holds the token and the CA certificate, and where it is mounted.
VOLUME_NAME: Final = "torchjob-progress"
MOUNT_PATH: Final = "/var/run/secrets/torchjob/progress"
TOKEN_FILE: Final = "token"
CA_FILE: Final = "ca.crt"
# The kubelet renews a projected token at 80 % of its life; an hour is what Kubeflow asks too.
TOKEN_EXPIRATION_SECONDS: Final = 3600

# On a job: "false" (or "off", "no", "0") leaves its pods without the variables and the volume.
ANNOTATION_PROGRESS: Final = f"{GROUP}/progress"
# On a replica pod, written by the webhook: the CA certificate's PEM, which the projected volume
# turns into a file through the downward API (a volume can read only the pod's own namespace, and
# this needs no ConfigMap in it).
ANNOTATION_PROGRESS_CA: Final = f"{GROUP}/progress-ca"
OFF_WORDS: Final = frozenset({"false", "off", "no", "0", "disabled"})

MAX_BODY_BYTES: Final = 64 * 1024


def limits_of(model: type[Model], key: str) -> Limits:
    """The bounds the proto gives field `key` of `model`, as the generated model holds them."""
    return next(info.limits or Limits() for info in model.FIELDS if info.key == key)


def _bound(value: int | None) -> int:
    if value is None:
        raise ValueError("the proto gives status.trainerStatus no such bound")
    return value


# Bounds on what one report may hold: the proto's on TrainerStatus (Kubeflow Trainer's, so its
# clients' reports fit), which the apiserver keeps too; lifecycle/progress.read_report checks them.
PERCENTAGE_RANGE: Final = (
    _bound(limits_of(TrainerStatus, "progressPercentage").minimum),
    _bound(limits_of(TrainerStatus, "progressPercentage").maximum),
)
# An int32 field: at most what one holds.
SECONDS_RANGE: Final = (
    _bound(limits_of(TrainerStatus, "estimatedRemainingSeconds").minimum),
    INT_BOUNDS["int32"][1],
)
MAX_METRICS: Final = _bound(limits_of(TrainerStatus, "metrics").max_items)
MAX_METRIC_TEXT: Final = _bound(limits_of(Metric, "name").max_length)

_STATUS_PATH = re.compile(
    r"^/apis/(?P<group>[^/]+)/(?P<version>[^/]+)/namespaces/(?P<namespace>[^/]+)"
    r"/(?P<plural>[^/]+)/(?P<name>[^/]+)/status$"
)


@dataclass(frozen=True, slots=True)
class JobRef:
    """The job a report is about, as its URL names it."""

    api: JobApi
    namespace: str
    name: str

    @property
    def path(self) -> str:
        """The URL path a training process POSTs its reports to."""
        api = self.api
        return (
            f"/apis/{api.group}/{api.version}/namespaces/{self.namespace}"
            f"/{api.plural}/{self.name}/status"
        )

    @property
    def audience(self) -> str:
        """The audience of the tokens that may report for this job (the path, as Kubeflow's
        audience is, without `/apis`): a token made for one job is refused for any other."""
        return self.path.removeprefix("/apis/")


def job_of_path(path: str) -> JobRef | None:
    """The job a report's URL path names, or None when it names none we serve."""
    match = _STATUS_PATH.match(path)
    if match is None:
        return None
    for api in JOB_APIS:
        if (api.group, api.version, api.plural) == match.group("group", "version", "plural"):
            return JobRef(api, match["namespace"], match["name"])
    return None


def reporting_enabled(job_annotations: dict[str, str] | None) -> bool:
    """Whether the job wants its pods to report progress (it does unless it says otherwise)."""
    value = (job_annotations or {}).get(ANNOTATION_PROGRESS)
    return value is None or value.strip().lower() not in OFF_WORDS


@dataclass(frozen=True, slots=True)
class ProgressEndpoint:
    """Where the training processes of this cluster report: the endpoint's base URL
    (`https://<service>.<namespace>.svc:<port>`) and the PEM of the CA its certificate is signed
    by. The webhook knows both and hands them to the pod rewrite."""

    base_url: str
    ca_pem: str

    def url(self, job: JobRef) -> str:
        return self.base_url.rstrip("/") + job.path
