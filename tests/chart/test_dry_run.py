"""Every values variant in charts/torchjob/ci/, rendered and sent to the real apiserver (the
version the chart targets) with a server-side dry run and strict field validation: each object is
valid against that version's schemas, and the pods meet the restricted Pod Security Standard."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import ControlPlane
from support.helm import CI_VALUES, Manifest, dump, template

pytestmark = pytest.mark.e2e

# Kinds from projects the chart integrates with; their CRDs are not part of this control plane.
THIRD_PARTY_GROUPS = {"cert-manager.io", "monitoring.coreos.com"}


def group_of(manifest: Manifest) -> str:
    api_version: str = manifest["apiVersion"]
    return api_version.rsplit("/", 1)[0] if "/" in api_version else ""


@pytest.mark.parametrize("values", CI_VALUES, ids=lambda p: p.name.removesuffix("-values.yaml"))
def test_server_side_dry_run(
    control_plane: ControlPlane, crd: None, namespace: str, values: Path
) -> None:
    # `crd`: a variant with trainer.enabled renders a ClusterTrainingRuntime beside its CRD. A dry
    # run creates no CRD, so the generated ones are installed first, as Helm has created the CRD
    # by the time it creates the runtime (trainer/runtimes.yaml).
    # Warn on (not enforce, which applies to pods only) the restricted standard, so the
    # apiserver checks the Deployments' pod templates and says so on any violation.
    control_plane.kubectl(
        "label", "namespace", namespace, "pod-security.kubernetes.io/warn=restricted"
    )
    manifests = template(release="dry", namespace=namespace, values_files=[values])
    served = [m for m in manifests if group_of(m) not in THIRD_PARTY_GROUPS]
    result = control_plane.kubectl(
        "apply",
        "--dry-run=server",
        "--validate=strict",
        "-f",
        "-",
        input=dump(served),
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "Warning" not in result.stderr, result.stderr
    assert result.stdout.count("(server dry run)") == len(served)
    others = {(group_of(m), m["kind"]) for m in manifests} - {
        (group_of(m), m["kind"]) for m in served
    }
    assert others <= {
        ("cert-manager.io", "Certificate"),
        ("cert-manager.io", "Issuer"),
        ("monitoring.coreos.com", "ServiceMonitor"),
        ("monitoring.coreos.com", "PrometheusRule"),
    }


def test_a_violation_is_reported(control_plane: ControlPlane, namespace: str) -> None:
    """The check above can fail: a container allowed to escalate draws the apiserver's warning."""
    control_plane.kubectl(
        "label", "namespace", namespace, "pod-security.kubernetes.io/warn=restricted"
    )
    manifests = template(
        release="dry",
        namespace=namespace,
        settings={"containerSecurityContext": {"allowPrivilegeEscalation": True}},
    )
    deployments = [m for m in manifests if m["kind"] == "Deployment"]
    result = control_plane.kubectl(
        "apply", "--dry-run=server", "-f", "-", input=dump(deployments), check=False
    )
    assert "would violate PodSecurity" in result.stderr, result.stderr
