"""The cluster model against hand-computed numbers.

The cluster is ``uniform(4, 8, nodes_per_switch=2)``: node1..node4, 8 GPUs each in two
NVLink islands of 4 that are also the two sockets; node1-2 under sw1, node3-4 under sw2,
both under spine. Global ids: node1 = 0..7, node2 = 8..15, node3 = 16..23, node4 = 24..31.
Default bandwidths (GB/s): NVLink 150, PCIe host 20, socket 16, network 12.5, spine 6.25.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from attentived.topology import Bandwidths, Link, Node, Topology, uniform


@pytest.fixture
def topo() -> Topology:
    return uniform(4, 8, nodes_per_switch=2)


def test_shape(topo: Topology) -> None:
    assert topo.num_gpus == 32 and topo.num_islands == 8
    assert [n.name for n in topo.nodes] == ["node1", "node2", "node3", "node4"]
    assert [n.switch for n in topo.nodes] == ["sw1", "sw1", "sw2", "sw2"]
    assert topo.switch_parent == {"sw1": "spine", "sw2": "spine", "spine": None}
    assert topo.gpu_name(13) == "node2:5" and topo.gpu_id("node2", 5) == 13
    assert list(topo.gpu_island[:12]) == [0] * 4 + [1] * 4 + [2] * 4


@pytest.mark.parametrize(
    ("a", "b", "link"),
    [
        (0, 0, Link.SELF),
        (0, 3, Link.NVLINK),  # one island
        (0, 4, Link.SOCKET),  # other island = other socket
        (7, 8, Link.NETWORK),  # node1 -> node2, both under sw1
        (0, 16, Link.SPINE),  # node1 (sw1) -> node3 (sw2)
        (24, 16, Link.NETWORK),
    ],
)
def test_link_classes(topo: Topology, a: int, b: int, link: Link) -> None:
    assert topo.link(a, b) == link == topo.link(b, a)


@pytest.mark.parametrize(
    ("gpus", "expected"),
    [
        ([5], (Link.SELF, float("inf"))),
        ([0, 1, 2, 3], (Link.NVLINK, 150.0)),
        ([0, 1, 4], (Link.SOCKET, 16.0)),
        ([0, 8], (Link.NETWORK, 12.5)),
        ([0, 1, 9, 31], (Link.SPINE, 6.25)),
    ],
)
def test_bottleneck(topo: Topology, gpus: list[int], expected: tuple[Link, float]) -> None:
    assert topo.bottleneck(gpus) == expected


@pytest.mark.parametrize(
    ("gpus", "gbytes", "seconds"),
    [
        # 2 GPUs in one island, 1 GB: ring 2(n-1)/n * 1 GB / 150 GB/s.
        ([0, 1], 1.0, 2 * (1 / 2) * 1 / 150),
        ([0, 1, 2, 3], 1.0, 2 * (3 / 4) * 1 / 150),
        # Both islands of one node: a ring in each island, then a 2-island ring over SYS (16).
        ([0, 1, 2, 3, 4, 5, 6, 7], 2.0, 2 * (3 / 4) * 2 / 150 + 2 * (1 / 2) * 2 / 16),
        # Uneven islands: the 3-GPU island's ring is the slower one, then the SYS ring.
        ([0, 1, 2, 4], 1.0, 2 * (2 / 3) * 1 / 150 + 2 * (1 / 2) * 1 / 16),
        # 4 GPUs, 2 per node, two nodes on one leaf: NVLink ring per node, then a 2-node ring at 12.5.
        ([0, 1, 8, 9], 1.0, 2 * (1 / 2) * 1 / 150 + 2 * (1 / 2) * 1 / 12.5),
        # The same across leaves: the second ring runs over the spine at 6.25.
        ([0, 1, 16, 17], 1.0, 2 * (1 / 2) * 1 / 150 + 2 * (1 / 2) * 1 / 6.25),
        # The slowest node's ring counts: node1's pair crosses sockets (16), node2's is NVLink.
        ([0, 4, 8, 9], 1.0, 2 * (1 / 2) * 1 / 16 + 2 * (1 / 2) * 1 / 12.5),
        # One GPU on each of 4 nodes: no intra-node ring, 4-node ring over the spine.
        ([0, 8, 16, 24], 1.0, 2 * (3 / 4) * 1 / 6.25),
        ([3], 1.0, 0.0),
        ([0, 1], 0.0, 0.0),
    ],
)
def test_allreduce_seconds(topo: Topology, gpus: list[int], gbytes: float, seconds: float) -> None:
    assert topo.allreduce_seconds(gpus, gbytes) == pytest.approx(seconds)
    assert topo.allreduce_seconds(np.array(gpus), gbytes) == pytest.approx(seconds)


def test_allreduce_uses_configured_bandwidths() -> None:
    topo = uniform(2, 4, nodes_per_switch=1, bandwidths=Bandwidths(nvlink=100.0, spine=2.0))
    assert topo.allreduce_seconds([0, 1], 1.0) == pytest.approx(1 / 100)
    assert topo.allreduce_seconds([0, 4], 1.0) == pytest.approx(1 / 2)


@pytest.mark.parametrize(
    ("n", "expected"),
    [
        (1, (0,)),
        (4, (0, 1, 2, 3)),
        (8, tuple(range(8))),
        (12, tuple(range(12))),  # node1 then node2's first island, same leaf
        (16, tuple(range(16))),  # a whole leaf before crossing to the spine
        (32, tuple(range(32))),
    ],
)
def test_ideal_gpus(topo: Topology, n: int, expected: tuple[int, ...]) -> None:
    ideal = topo.ideal_gpus(n)
    assert ideal == expected
    assert topo.spread(ideal)[1] == -(-n // 8)


def test_ideal_gpus_prefers_bigger_islands_and_nodes() -> None:
    small = Node.from_groups("small", [[0, 1]], switch="a")
    big = Node.from_groups("big", [[0], [1, 2, 3]], switch="a")
    topo = Topology(nodes=(small, big))
    assert topo.ideal_gpus(3) == (3, 4, 5)  # big's 3-GPU island, ids 2 + (1, 2, 3)


@pytest.mark.parametrize(("n", "least"), [(1, (1, 1, 1)), (4, (1, 1, 1)), (8, (2, 1, 1)), (12, (3, 2, 1)),
                                          (16, (4, 2, 1)), (32, (8, 4, 2))])
def test_least_spread_is_the_ideal_sets_and_is_asked_once_per_size(topo: Topology, n: int, least) -> None:
    assert topo.least_spread(n) == least == topo.spread(topo.ideal_gpus(n))
    assert topo.least_spread(n) is topo.least_spread(n)


@pytest.mark.parametrize("n", [0, 33])
def test_ideal_gpus_rejects_impossible_sizes(topo: Topology, n: int) -> None:
    with pytest.raises(ValueError, match="cannot place"):
        topo.ideal_gpus(n)


def test_spread(topo: Topology) -> None:
    assert topo.spread([0, 1]) == (1, 1, 1)
    assert topo.spread([0, 4, 8]) == (3, 2, 1)
    assert topo.spread([0, 16]) == (2, 2, 2)


def test_from_groups_without_sockets_is_one_socket() -> None:
    node = Node.from_groups("n", [[0, 1], [2]])
    assert node.links == (
        (Link.SELF, Link.NVLINK, Link.PCIE_HOST),
        (Link.NVLINK, Link.SELF, Link.PCIE_HOST),
        (Link.PCIE_HOST, Link.PCIE_HOST, Link.SELF),
    )
    assert node.islands == ((0, 1), (2,))


@pytest.mark.parametrize(
    ("links", "message"),
    [
        (((Link.SELF, Link.NVLINK),), "row 0 has 2 entries"),
        (((Link.NVLINK,),), "must link to itself"),
        (((Link.SELF, Link.SELF), (Link.SELF, Link.SELF)), "cannot be SELF"),
        (((Link.SELF, Link.NVLINK), (Link.SOCKET, Link.SELF)), "differ"),
        (((Link.SELF, Link.NETWORK), (Link.NETWORK, Link.SELF)), "cannot be NETWORK"),
    ],
)
def test_node_rejects_bad_matrices(links: tuple[tuple[Link, ...], ...], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Node(name="n", links=links)


def test_topology_rejects_duplicates_and_empty() -> None:
    node = Node.from_groups("n", [[0]])
    with pytest.raises(ValueError, match="duplicate node names: n"):
        Topology(nodes=(node, node))
    with pytest.raises(ValueError, match="at least one node"):
        Topology(nodes=())


def test_node_resources_default_to_unknown_and_are_checked() -> None:
    node = Node.from_groups("n", [[0, 1]])
    assert (node.cpus, node.mem_mb, node.gpu_type, node.features) == (0, 0, "", ())
    assert not Topology((node,)).declares_resources
    assert Topology((replace(node, cpus=64),)).declares_resources
    assert Topology((replace(node, features=("ib",)),)).declares_resources
    with pytest.raises(ValueError, match="node n: cpus must be a whole number >= 0"):
        replace(node, cpus=-1)
    with pytest.raises(ValueError, match="node n: mem_mb must be a whole number >= 0"):
        replace(node, mem_mb=1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="node n: features must be a tuple of non-empty strings"):
        replace(node, features=["ib"])  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "nodes",
    [
        pytest.param([[[0, 1, 2, 3], [4, 5, 6, 7]]] * 3, id="uniform: popcount per word"),
        pytest.param([[[0, 1, 2, 3, 4, 5, 6, 7]], [[0, 1], [2, 3]], [[0, 1, 2]]], id="mixed sizes: sums per run"),
        pytest.param([[[0, 2], [1, 3]], [[0, 1], [2, 3]]], id="interleaved islands: gathered"),
        pytest.param([[[0, 1]], [], [[0, 1, 2, 3]], []], id="nodes without GPUs"),
    ],
)
def test_per_node_and_per_island_count_a_mask(nodes: list[list[list[int]]]) -> None:
    built = tuple(Node.from_groups(f"n{i}", groups) if groups else Node(name=f"n{i}", links=()) for i, groups in enumerate(nodes))
    topo = Topology(nodes=built)
    rng = np.random.default_rng(0)
    for mask in (rng.random(topo.num_gpus) < 0.5, np.ones(topo.num_gpus, bool), (rng.random(2 * topo.num_gpus) < 0.5)[::2]):
        assert topo.per_node(mask).tolist() == np.bincount(topo.gpu_node, weights=mask, minlength=len(built)).astype(int).tolist()
        assert topo.per_island(mask).tolist() == np.bincount(topo.gpu_island, weights=mask, minlength=topo.num_islands).astype(int).tolist()


def test_a_gpu_mask_must_be_bools_over_every_gpu(topo: Topology) -> None:
    for bad in (np.ones(topo.num_gpus, np.int64), np.ones(topo.num_gpus - 1, bool)):
        with pytest.raises(ValueError, match="must be 32 bools"):
            topo.per_node(bad)
        with pytest.raises(ValueError, match="must be 32 bools"):
            topo.per_island(bad)
