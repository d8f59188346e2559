"""The console's Replicas, log, Resources and TensorBoard pages in a real Chromium on the real
control plane, signed in with a tenant's token. There is no kubelet here (the test plays it), so
the apiserver cannot serve a container's log: what is shown is the replicas' table following pod
changes without a reload, a failed pull's whole message from the kubelet, a log page whose pod is
deleted while it is open saying the log went with it, the apiserver's 403 for another namespace's
pod, the resource tab saying the cluster serves no metrics.k8s.io, the Prometheus path against
answers recorded from a real Prometheus with the namespace enforced, and the TensorBoard tab's
refusals and, with no TensorBoard domain set, its directions instead of a proxy. Real log
streaming is the real node's to show."""

from __future__ import annotations

import json
from typing import Any

from playwright.async_api import Browser, expect
from support import ControlPlane
from support.console import (
    Console,
    patch_status,
    screenshot_path,
    signed_in,
    start_console,
    tenant_token,
)
from support.jobs import JobBuilder, job_manifest
from support.pods import bare_pod
from support.prometheus import fake_prometheus, recording

from torchjob.api.constants import LABEL_JOB_NAME
from torchjob.views.console import series

LIVE = 10_000  # ms: a change reaches an open page within seconds, without a reload


def create_job(control_plane: ControlPlane, namespace: str, name: str, stem: str = "basic") -> None:
    manifest = job_manifest(stem, name)
    control_plane.kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(manifest))


def create_pod(control_plane: ControlPlane, namespace: str, job: str, name: str) -> None:
    """A replica's pod as the reconciler names and labels it; no node takes it."""
    pod = bare_pod(name, labels={LABEL_JOB_NAME: job}, image="pytorch/pytorch:2.0.0")
    control_plane.kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(pod))


def patch_pod_status(
    control_plane: ControlPlane, namespace: str, name: str, status: dict[str, Any]
) -> None:
    control_plane.kubectl(
        "patch",
        "pod",
        name,
        "-n",
        namespace,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"status": status}),
    )


async def test_replicas_follow_their_pods_and_a_deleted_pods_log_says_it_is_gone(
    control_plane: ControlPlane, namespace: str, console: Console, browser: Browser
) -> None:
    token = tenant_token(control_plane, namespace, "edit")
    create_job(control_plane, namespace, "live")
    create_pod(control_plane, namespace, "live", "live-worker-0")
    context, page = await signed_in(browser, console, token)
    await page.goto(f"/ns/{namespace}/jobs/live/replicas")
    rows = page.locator("#replica-rows")
    await expect(rows.locator("tr")).to_have_count(4)
    worker = page.locator("#replica-worker-0")
    await expect(worker.get_by_text("Pending")).to_be_visible()
    await expect(page.locator("#replica-worker-1")).to_contain_text("No pod")

    exited = {"terminated": {"reason": "Error", "exitCode": 1}}
    patch_pod_status(
        control_plane,
        namespace,
        "live-worker-0",
        {
            "phase": "Running",
            "containerStatuses": [
                {
                    "name": "pytorch",
                    "image": "pytorch/pytorch:2.0.0",
                    "imageID": "",
                    "ready": True,
                    "restartCount": 2,
                    "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}},
                    "lastState": exited,
                }
            ],
        },
    )
    await expect(worker.get_by_text("Running")).to_be_visible(timeout=LIVE)
    await expect(worker).to_contain_text("Error (exit code 1)")
    create_pod(control_plane, namespace, "live", "live-worker-1")
    await expect(page.locator("#replica-worker-1")).to_contain_text("live-worker-1", timeout=LIVE)
    await page.screenshot(path=screenshot_path("console-replicas.png"), full_page=True)

    await page.get_by_role("link", name="Log of worker-1").click()
    await expect(page.get_by_role("heading", name="Log of live-worker-1")).to_be_visible()
    # The pod has no node: its container never starts, and the page says it waits for it.
    await expect(page.locator("#log-status")).to_contain_text(
        "Waiting for the container pytorch to start (the pod is Pending)", timeout=LIVE
    )
    control_plane.kubectl("delete", "pod", "live-worker-1", "-n", namespace, "--wait=false")
    await expect(page.locator("#log-status")).to_contain_text(
        "The pod live-worker-1 is gone: its log went with it.", timeout=LIVE
    )
    await expect(page.locator("#log-status")).to_contain_text("no newer pod")
    download = page.get_by_role("link", name="Download")
    assert "/ns/" in str(await download.get_attribute("href"))
    await context.close()


async def test_another_namespaces_pod_and_its_log_are_the_apiservers_403(
    control_plane: ControlPlane, namespace: str, console: Console, browser: Browser
) -> None:
    token = tenant_token(control_plane, namespace, "edit")
    context, page = await signed_in(browser, console, token)
    for path, refused in (
        ("/ns/kube-system/pods/kube-proxy/log", 'cannot get resource "pods"'),
        ("/ns/kube-system/pods/kube-proxy/log/download", 'cannot get resource "pods/log"'),
        ("/ns/kube-system/jobs/any/replicas", 'cannot get resource "pytorchtrainingjobs"'),
    ):
        answer = await page.goto(path)
        assert answer is not None and answer.status == 403, path
        await expect(page.get_by_role("heading", name="403 Forbidden")).to_be_visible()
        await expect(page.locator("main")).to_contain_text(refused)
        await expect(page.locator("main")).to_contain_text('in the namespace "kube-system"')
    await context.close()


def grant_metrics_reading(control_plane: ControlPlane, namespace: str) -> None:
    """What metrics-server's own ClusterRole gives `view` and `edit`: reading PodMetrics."""
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": "test-metrics-reader"},
        "rules": [
            {"apiGroups": ["metrics.k8s.io"], "resources": ["pods"], "verbs": ["get", "list"]}
        ],
    }
    control_plane.kubectl("apply", "-f", "-", input=json.dumps(role))
    control_plane.kubectl(
        "create",
        "rolebinding",
        "edit-user-metrics",
        "--clusterrole=test-metrics-reader",
        f"--serviceaccount={namespace}:edit-user",
        "-n",
        namespace,
    )


async def test_the_resources_tab_says_the_cluster_serves_no_metrics(
    control_plane: ControlPlane, namespace: str, console: Console, browser: Browser
) -> None:
    token = tenant_token(control_plane, namespace, "edit")
    grant_metrics_reading(control_plane, namespace)
    create_job(control_plane, namespace, "bare")
    context, page = await signed_in(browser, console, token)
    await page.goto(f"/ns/{namespace}/jobs/bare/resources")
    await expect(page.locator("#resources-source")).to_contain_text("metrics.k8s.io")
    await expect(page.locator("#resources-status")).to_contain_text(
        "This cluster serves no metrics.k8s.io", timeout=LIVE
    )
    await context.close()


async def test_prometheus_series_are_drawn_and_confined_to_the_users_namespace(
    control_plane: ControlPlane, namespace: str, console: Console, browser: Browser
) -> None:
    token = tenant_token(control_plane, namespace, "edit")
    recorded = recording()
    # The recorded job's name, so that its replicas' recorded series are this job's, with what
    # each replica was given.
    resources = {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "300m"}}
    manifest = JobBuilder.example("basic", recorded.job).container(resources=resources).build()
    control_plane.kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(manifest))
    recorded_times = series.matrix_chart(recorded.answers["cpu"])["times"]
    async with fake_prometheus() as prometheus:
        with_prometheus = start_console(control_plane, "--prometheus-url", prometheus.url)
        try:
            context, page = await signed_in(browser, with_prometheus, token)
            await page.goto(f"/ns/{namespace}/jobs/{recorded.job}/resources")
            await expect(page.locator("#resources-source")).to_contain_text("Prometheus")
            cpu = page.locator("#chart-cpu")
            replicas = f"{recorded.job}-worker-0 {recorded.job}-worker-1"
            await expect(cpu).to_have_attribute("data-pods", replicas)
            await expect(cpu).to_have_attribute("data-points", str(len(recorded_times)))
            await expect(page.locator("#chart-memory .u-legend")).to_contain_text(
                f"{recorded.job}-worker-1"
            )
            await expect(page.locator("#gpu")).to_be_hidden()
            # The request and limit lines, and each pod's latest value.
            await expect(cpu).to_have_attribute("data-bounds", "request, limit")
            await expect(page.locator("#chart-memory")).to_have_attribute("data-bounds", "request")
            await expect(page.locator("#latest-cpu")).to_contain_text(f"{recorded.job}-worker-1: ")
            await expect(cpu.locator(".u-legend")).to_contain_text("limit")
            sent = [q["query"] for q in prometheus.queries]
            assert len(sent) == 3
            assert all(f'namespace="{namespace}"' in q for q in sent), sent
            assert all(f'pod=~"{recorded.job}-(worker)-[0-9]+"' in q for q in sent), sent

            before = len(prometheus.queries)
            refused = await page.request.get("/ns/kube-system/jobs/any/resources/series")
            assert refused.status == 403
            assert "kube-system" in (await refused.json())["error"]
            assert len(prometheus.queries) == before  # Prometheus never asked
            await context.close()
        finally:
            with_prometheus.process.close()


async def test_tensorboard_is_refused_without_a_spec_or_without_services_proxy(
    control_plane: ControlPlane, namespace: str, console: Console, browser: Browser
) -> None:
    token = tenant_token(control_plane, namespace, "view")
    create_job(control_plane, namespace, "plain")
    create_job(control_plane, namespace, "boarded", stem="scheduler-tensorboard")
    context, page = await signed_in(browser, console, token)
    answer = await page.goto(f"/ns/{namespace}/jobs/plain/tensorboard")
    assert answer is not None and answer.status == 404
    await expect(page.locator("main")).to_contain_text("has no TensorBoard")
    answer = await page.goto(f"/ns/{namespace}/jobs/boarded/tensorboard")
    assert answer is not None and answer.status == 403
    await expect(page.locator("main")).to_contain_text("services/proxy")
    await context.close()
    # With `edit`, and no origin set up for TensorBoards: how to reach it, and nothing passed on.
    editor = tenant_token(control_plane, namespace, "edit")
    context, page = await signed_in(browser, console, editor)
    answer = await page.goto(f"/ns/{namespace}/jobs/boarded/tensorboard")
    assert answer is not None and answer.status == 200
    await expect(page.locator("#tensorboard-command")).to_have_text(
        f"torchjob tensorboard boarded -n {namespace}"
    )
    await expect(page.locator("#tensorboard-address")).to_have_text(
        f"http://boarded-tensorboard.{namespace}.svc:6006/"
    )
    assert (await page.request.get(f"/ns/{namespace}/jobs/boarded/tensorboard/")).status == 404
    await context.close()


# What a kubelet says of an image it cannot pull: the cause comes last, past the 200 characters a
# condition keeps.
PULL_MESSAGE = (
    'Failed to pull image "registry.example.com/team-a/trainer:v1.2.3-typo": failed to pull and '
    'unpack image "registry.example.com/team-a/trainer:v1.2.3-typo": failed to resolve reference '
    '"registry.example.com/team-a/trainer:v1.2.3-typo": registry.example.com/team-a/trainer:'
    "v1.2.3-typo: not found"
)


async def test_a_failed_pull_shows_the_kubelets_whole_message(
    control_plane: ControlPlane, namespace: str, console: Console, browser: Browser
) -> None:
    token = tenant_token(control_plane, namespace, "edit")
    create_job(control_plane, namespace, "typo")
    create_pod(control_plane, namespace, "typo", "typo-worker-0")
    waiting = {"waiting": {"reason": "ErrImagePull", "message": PULL_MESSAGE}}
    container = {"name": "pytorch", "image": "x", "imageID": "", "ready": False, "restartCount": 0}
    statuses = [{**container, "state": waiting}]
    patch_pod_status(
        control_plane,
        namespace,
        "typo-worker-0",
        {"phase": "Pending", "containerStatuses": statuses},
    )
    cut = f"replica typo-worker-0 cannot start: ErrImagePull: {PULL_MESSAGE}"[:197] + "..."
    failure = {
        "type": "StartFailure",
        "status": "True",
        "reason": "ImagePullFailed",
        "message": cut,
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }
    patch_status(control_plane, namespace, "typo", {"phase": "Pending", "conditions": [failure]})
    assert not cut.endswith("not found...")

    context, page = await signed_in(browser, console, token)
    await page.goto(f"/ns/{namespace}/jobs/typo")
    said = page.locator("#kubelet-said")
    await expect(said).to_contain_text(f"typo-worker-0: pytorch: {PULL_MESSAGE}")
    await expect(page.get_by_role("button", name="Pause…")).to_have_count(0)  # never ran
    await page.goto(f"/ns/{namespace}/jobs/typo/replicas")
    await expect(page.locator("#replica-worker-0")).to_contain_text(PULL_MESSAGE)
    await context.close()
