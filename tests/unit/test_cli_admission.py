"""`torchjob run` admits a manifest through the webhook's own validation: what the apiserver's
strict field validation refuses (an unknown field at the top, in the spec or in a pod template) is
refused too, each with its field path."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from support.jobs import JobBuilder

from torchjob.cli.manifest import InvalidManifest, admit, read_manifest


def test_unknown_fields_are_refused_with_their_paths() -> None:
    manifest = JobBuilder("j").replicas("worker", 1).container(resouces={}).build()
    manifest["replica"] = 2
    manifest["spec"]["runPolicy"] = {"backoffLimt": 2}
    with pytest.raises(InvalidManifest) as refused:
        admit(manifest)
    assert refused.value.errors == [
        "replica: unknown field",
        "spec.replicaSpecs[0].template.spec.containers[0].resouces: unknown field",
        "spec.runPolicy.backoffLimt: unknown field",
    ]


def test_a_name_no_service_can_carry_is_refused() -> None:
    with pytest.raises(InvalidManifest) as refused:
        admit(JobBuilder("resnet.v2").replicas("worker", 1).build())
    assert [e.split(":")[0] for e in refused.value.errors] == ["metadata.name"]


def test_a_valid_manifest_is_admitted() -> None:
    admitted = admit(JobBuilder("resnet-v2").replicas("worker", 2).build())
    assert admitted.job["metadata"]["name"] == "resnet-v2"


def test_an_unquoted_date_is_a_string_as_kubectl_sends_it(tmp_path: Path) -> None:
    manifest = JobBuilder("dated").replicas("worker", 1).build()
    manifest["metadata"]["annotations"] = {"day": "DAY"}
    manifest["spec"]["replicaSpecs"][0]["template"]["spec"]["containers"][0]["env"] = [
        {"name": "D", "value": "DAY"}
    ]
    path = tmp_path / "job.yaml"
    path.write_text(
        yaml.safe_dump(manifest).replace("'DAY'", "2024-01-02").replace("DAY", "2024-01-02")
    )
    read = read_manifest(str(path))
    assert read["metadata"]["annotations"] == {"day": "2024-01-02"}
    assert admit(read).warnings == []
