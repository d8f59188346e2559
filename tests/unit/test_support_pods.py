"""support.pods.bare_pod writes the pod manifests the e2e and chart tests used to spell out."""

from __future__ import annotations

from support.pods import bare_pod


def test_a_bare_pod_has_one_container_and_only_the_fields_asked_for() -> None:
    assert bare_pod("stray", container="c", image="i") == {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "stray"},
        "spec": {"containers": [{"name": "c", "image": "i"}]},
    }


def test_labels_and_a_node_are_set_when_named() -> None:
    assert bare_pod("j-worker-0", labels={"job": "j"}, node="n1") == {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "j-worker-0", "labels": {"job": "j"}},
        "spec": {"nodeName": "n1", "containers": [{"name": "pytorch", "image": "trainer:1"}]},
    }
