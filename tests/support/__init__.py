"""Test support: a real Kubernetes control plane on loopback and the PKI it runs on."""

from .controlplane import (
    Binaries,
    ControlPlane,
    ControlPlaneError,
    KubectlError,
    control_plane_pids,
)

__all__ = ["Binaries", "ControlPlane", "ControlPlaneError", "KubectlError", "control_plane_pids"]
