"""`torchjob top job` and `torchjob top node`: GPUs, CPU and memory requested and allocated, read
from the API alone (the jobs of every API served, their pods, the nodes); what is used too when
metrics-server answers."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from torchjob.api.job_api import api_of
from torchjob.cli.commands import EXIT_SUCCEEDED, target_of
from torchjob.cli.connection import connect
from torchjob.views.cli.job_reference import JobRef
from torchjob.views.cli.tables import top_job_table, top_node_table
from torchjob.views.quantities import Resources, quantity


async def top(args: argparse.Namespace) -> int:
    async with connect(target_of(args)) as cluster:
        if args.what == "node":
            nodes = await cluster.nodes()
            pods = await cluster.pods(all_namespaces=True, field="status.phase!=Succeeded")
            metrics = None if args.no_metrics else await cluster.node_metrics()
            node_usage = (
                None
                if metrics is None
                else {str(m["metadata"]["name"]): _usage(m.get("usage")) for m in metrics}
            )
            sys.stdout.write(top_node_table(nodes, pods, usage=node_usage))
            return EXIT_SUCCEEDED
        listing = await cluster.list_every_kind()
        for refusal in listing.refused:
            sys.stderr.write(f"Warning: {refusal}\n")
        jobs = listing.jobs
        if args.job:
            ref: JobRef = args.job
            jobs = [j for j in jobs if JobRef(api_of(j), j["metadata"]["name"]) == ref]
            if not jobs:
                await cluster.get_job(ref.name, ref.api)  # not found: with similar names
        pods = await cluster.job_pods()
        metrics = None if args.no_metrics else await cluster.pod_metrics()
        pod_usage = (
            None
            if metrics is None
            else {
                (str(m["metadata"]["namespace"]), str(m["metadata"]["name"])): _pod_usage(m)
                for m in metrics
            }
        )
        sys.stdout.write(
            top_job_table(jobs, pods, all_namespaces=cluster.target.all_namespaces, usage=pod_usage)
        )
    return EXIT_SUCCEEDED


def _usage(amounts: Any) -> Resources:
    amounts = amounts if isinstance(amounts, dict) else {}
    return Resources(quantity(amounts.get("cpu")), quantity(amounts.get("memory")))


def _pod_usage(metric: dict[str, Any]) -> Resources:
    total = Resources()
    for container in metric.get("containers") or []:
        total = total + _usage(container.get("usage"))
    return total
