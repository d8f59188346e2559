"""The chart's event policy: an Event that reads as our services' (its reporting controller,
reporting component or source naming the reconciler or the housekeeper) is written by their
ServiceAccounts only. Rendered with its names read from api/constants.py, switched off by a
value, and on the real control plane: a tenant allowed to create Events is refused one that
reads as ours, through either Events API, while the reconciler's own goes through."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from support import ControlPlane
from support.eventually import eventually
from support.helm import Manifest, find, one, template
from support.operator import apply

from torchjob.api.constants import OUR_REPORTERS, REPORTER_RECONCILER

RELEASE, RELEASE_NAMESPACE = "tj", "tj-events"
POLICY = "ValidatingAdmissionPolicy"


def policy_objects(**settings: object) -> list[Manifest]:
    manifests = template(release=RELEASE, namespace=RELEASE_NAMESPACE, settings=settings)
    return [m for m in manifests if m["kind"] in (POLICY, f"{POLICY}Binding")]


def variable(policy: Manifest, name: str) -> Any:
    [found] = [v for v in policy["spec"]["variables"] if v["name"] == name]
    return json.loads(found["expression"])  # a CEL list literal of strings is JSON


def test_the_policy_names_our_reporters_and_this_releases_writers() -> None:
    objects = policy_objects(**{"eventPolicy.allowedUsers": ["system:serviceaccount:b:other"]})
    policy, binding = one(objects, POLICY), one(objects, f"{POLICY}Binding")
    assert binding["spec"] == {
        "policyName": policy["metadata"]["name"],
        "validationActions": ["Deny"],
    }
    assert tuple(variable(policy, "reporters")) == OUR_REPORTERS
    assert variable(policy, "writers") == [
        f"system:serviceaccount:{RELEASE_NAMESPACE}:{RELEASE}-torchjob-reconciler",
        f"system:serviceaccount:{RELEASE_NAMESPACE}:{RELEASE}-torchjob-housekeeper",
        "system:serviceaccount:b:other",
    ]
    rules = policy["spec"]["matchConstraints"]["resourceRules"]
    assert rules == [
        {
            "apiGroups": ["", "events.k8s.io"],
            "apiVersions": ["*"],
            "operations": ["CREATE", "UPDATE"],
            "resources": ["events"],
        }
    ]


def test_the_policy_can_be_switched_off() -> None:
    assert not find(policy_objects(**{"eventPolicy.enabled": False}), POLICY)


def service_account(namespace: str, name: str) -> str:
    return f"system:serviceaccount:{namespace}:{name}"


def may_write_events(control_plane: ControlPlane, namespace: str, user: str) -> None:
    """`user` (a ServiceAccount's) may create and update Events of both APIs in `namespace`."""
    name = user.rsplit(":", 1)[1]
    control_plane.kubectl(
        "create", "role", f"{name}-events", "-n", namespace,
        "--verb=create,update,patch,get", "--resource=events,events.events.k8s.io",
    )  # fmt: skip
    _, account_namespace, account = user.rsplit(":", 2)
    control_plane.kubectl(
        "create", "rolebinding", f"{name}-events", "-n", namespace, f"--role={name}-events",
        f"--serviceaccount={account_namespace}:{account}",
    )  # fmt: skip


def new_event(api: str, name: str, reporter: str) -> dict[str, Any]:
    regarding = {"apiVersion": "v1", "kind": "ConfigMap", "name": "anything"}
    if api == "core":
        return {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name},
            "involvedObject": regarding,
            "reason": "SuccessfulDelete",
            "message": "Deleted pod: trust me",
            "source": {"component": reporter},
            "type": "Normal",
        }
    return {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": name},
        "regarding": regarding,
        "reason": "SuccessfulDelete",
        "note": "Deleted pod: trust me",
        "action": "Delete",
        "reportingController": reporter,
        "reportingInstance": f"{reporter}-x",
        "eventTime": "2026-01-01T00:00:00.000000Z",
        "type": "Normal",
    }


def write(control_plane: ControlPlane, namespace: str, event: dict[str, Any], user: str) -> str:
    """'' when `user` created the Event in `namespace`, else the apiserver's refusal."""
    about = "involvedObject" if "involvedObject" in event else "regarding"
    event[about]["namespace"] = namespace
    result = control_plane.kubectl(
        "create", "-n", namespace, "-f", "-", input=json.dumps(event), as_user=user, check=False
    )
    return "" if result.returncode == 0 else result.stderr


@pytest.fixture
def installed_policy(control_plane: ControlPlane) -> Iterator[list[Manifest]]:
    objects = policy_objects()
    apply(control_plane, objects)
    yield objects
    for manifest in objects:
        control_plane.kubectl("delete", manifest["kind"], manifest["metadata"]["name"], check=False)


@pytest.mark.e2e
async def test_a_tenant_cannot_write_an_event_that_reads_as_ours(
    control_plane: ControlPlane, namespace: str, installed_policy: list[Manifest]
) -> None:
    tenant = service_account(namespace, "tenant")
    reconciler = variable(one(installed_policy, POLICY), "writers")[0]
    control_plane.kubectl("create", "serviceaccount", "tenant", "-n", namespace)
    for user in (tenant, reconciler):
        may_write_events(control_plane, namespace, user)
    attempts = iter(range(1_000_000))

    async def forged_refused() -> str:
        # A new name each time: a forged Event made before the policy took effect is no answer.
        return write(
            control_plane,
            namespace,
            new_event("events", f"forged-{next(attempts)}", REPORTER_RECONCILER),
            tenant,
        )

    refusal = await eventually(forged_refused, "the policy to refuse the tenant's forged Event")
    assert "written by torchjob's own ServiceAccounts only" in refusal, refusal
    assert write(
        control_plane, namespace, new_event("core", "forged-core", REPORTER_RECONCILER), tenant
    )
    # The tenant's own Events, and ours from the reconciler, go through.
    assert write(control_plane, namespace, new_event("events", "own", "tenant-tool"), tenant) == ""
    assert (
        write(
            control_plane, namespace, new_event("events", "ours", REPORTER_RECONCILER), reconciler
        )
        == ""
    )
    # An Event of ours cannot be changed by a tenant, nor a tenant's made to read as ours.
    assert (
        write(control_plane, namespace, new_event("core", "own-core", "tenant-tool"), tenant) == ""
    )
    for name, change in (
        ("ours", {"count": 7}),
        ("own-core", {"source": {"component": REPORTER_RECONCILER}}),
    ):
        changed = control_plane.kubectl(
            "patch", "event", name, "-n", namespace, "--type=merge", "-p", json.dumps(change),
            as_user=tenant, check=False,
        )  # fmt: skip
        assert changed.returncode != 0 and "own ServiceAccounts only" in changed.stderr, (
            name,
            changed.stderr,
        )
