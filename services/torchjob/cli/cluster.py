"""What a cluster would make of an admitted job: the reconciler's first plan, and each replica's
Pod as the reconciler renders it and the webhook rewrites it at admission (a Kubeflow
PyTorchJob's pod with Kubeflow's labels and environment)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from torchjob.api import constants
from torchjob.api.progress import ProgressEndpoint
from torchjob.cli.manifest import AdmittedJob
from torchjob.lifecycle.plan import Plan, plan
from torchjob.lifecycle.round import Observed
from torchjob.render.job_kinds import kind_of
from torchjob.render.pod_rewrite import PreparedJob
from torchjob.render.replica_objects import render_pod, render_service
from torchjob.render.topology import Replica

# The dry run's stand-in for the progress endpoint: a cluster's webhook gives each pod its own
# endpoint's URL and CA (render/progress.py), which the command does not know.
DRY_RUN_PROGRESS = ProgressEndpoint(
    base_url="https://<the torchjob webhook's progress endpoint>",
    ca_pem="<the torchjob webhook's CA certificate>",
)


def first_plan(job: AdmittedJob) -> Plan:
    """The reconciler's plan for a job it sees for the first time: nothing exists yet."""
    return plan(Observed.of_json(job.meta, job.spec, {}, [], frozenset(), datetime.now(UTC)))


def admitted_pod(
    job: AdmittedJob,
    replica: Replica,
    annotations: dict[str, str],
    scheduler_name: str = constants.T9K_SCHEDULER_NAME,
    progress: ProgressEndpoint | None = None,
) -> dict[str, Any]:
    """The replica's pod as created by the reconciler and rewritten by the webhook, reporting
    progress to `progress` (None: the pod gets nothing for it, as `torchjob run` gives its
    processes their own loopback endpoint)."""
    pod = render_pod(job.meta, job.spec, replica, annotations, scheduler_name, job.api)
    prepared = PreparedJob(job.typed, job.api)
    kind = kind_of(job.api)
    return kind.rewrite_pod(prepared, job.own_spec or {}, pod, progress).pod


def dry_run_documents(job: AdmittedJob) -> list[dict[str, Any]]:
    """The defaulted job, then every replica's Pod and Service, in rank order."""
    decision = first_plan(job)
    pods = {
        item.replica: admitted_pod(job, item.replica, item.annotations, progress=DRY_RUN_PROGRESS)
        for item in decision.create_pods
    }
    services = {r: render_service(job.meta, r, job.api) for r in decision.create_services}
    documents: list[dict[str, Any]] = [job.manifest]
    for replica in sorted(set(pods) | set(services), key=lambda r: r.rank):
        documents += [d for d in (pods.get(replica), services.get(replica)) if d is not None]
    return documents
