"""The scale tier's fake nodes: each kwok's to play, with its GPUs and its place in the
topology (racks of nodes, blocks of racks, zones of blocks)."""

from __future__ import annotations

from collections import Counter

from support.scale import (
    BLOCK_LABEL,
    FAKE_NODE_ANNOTATION,
    HOSTNAME_LABEL,
    RACK_LABEL,
    ZONE_LABEL,
    NodeShape,
    Topology,
    fake_node,
)


def test_a_node_is_kwoks_with_eight_gpus_in_its_status() -> None:
    node = fake_node(3)
    key, value = FAKE_NODE_ANNOTATION
    assert node["metadata"]["annotations"] == {key: value}
    assert node["status"]["capacity"]["nvidia.com/gpu"] == "8"
    assert node["status"]["allocatable"] == node["status"]["capacity"]
    assert node["metadata"]["labels"][HOSTNAME_LABEL] == node["metadata"]["name"]


def test_names_are_distinct_and_sort_in_creation_order() -> None:
    names = [fake_node(index)["metadata"]["name"] for index in range(5000)]
    assert len(set(names)) == 5000
    assert names == sorted(names)


def test_racks_blocks_and_zones_nest() -> None:
    topology = Topology(nodes_per_rack=4, racks_per_block=2, blocks_per_zone=3)
    labels = [fake_node(index, topology=topology)["metadata"]["labels"] for index in range(48)]
    assert Counter(node[RACK_LABEL] for node in labels) == {f"rack-{r}": 4 for r in range(12)}
    assert Counter(node[BLOCK_LABEL] for node in labels) == {f"block-{b}": 8 for b in range(6)}
    assert Counter(node[ZONE_LABEL] for node in labels) == {"zone-0": 24, "zone-1": 24}
    # Every rack lies in one block, every block in one zone.
    assert len({(node[RACK_LABEL], node[BLOCK_LABEL]) for node in labels}) == 12
    assert len({(node[BLOCK_LABEL], node[ZONE_LABEL]) for node in labels}) == 6


def test_the_shape_sets_the_capacity() -> None:
    node = fake_node(0, NodeShape(cpu="8", memory="64Gi", gpus=4, pods=20))
    assert node["status"]["capacity"] == {
        "cpu": "8",
        "memory": "64Gi",
        "pods": "20",
        "nvidia.com/gpu": "4",
    }
