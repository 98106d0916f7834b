"""gres.conf and topology.conf parsing, on the project's Slurm test cluster and on errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attentived.topology import (
    Bandwidths,
    Link,
    TopologyParseError,
    parse_gres_conf,
    parse_topology_conf,
    topology_from_slurm,
    uniform,
)

FIXTURES = Path(__file__).parent / "fixtures"
LAB_GRES = (FIXTURES / "lab_gres.conf").read_text()
LAB_TOPOLOGY = (FIXTURES / "lab_topology.conf").read_text()

N, H, S, X = Link.NVLINK, Link.PCIE_HOST, Link.SOCKET, Link.SELF


def test_lab_cluster_gres_gives_two_islands_on_two_sockets() -> None:
    nodes = parse_gres_conf(LAB_GRES)
    assert list(nodes) == ["node1", "node2", "node3", "node4"]
    node = nodes["node3"]
    assert node.islands == ((0, 1, 2, 3), (4, 5, 6, 7))
    assert node.links[0] == (X, N, N, N, S, S, S, S)
    assert node.links[5] == (S, S, S, S, N, X, N, N)
    assert node.nvlink_bw is not None
    assert node.nvlink_bw[0][1] == 4 * 25.0
    assert node.switch == "sw0"
    assert node.gpu_type == "h100"  # Type= on every GPU line
    assert (node.cpus, node.mem_mb, node.features) == (0, 0, ())  # gres.conf does not say


def test_gpu_type_is_the_nodes_one_type_or_none() -> None:
    text = (
        "NodeName=a1 Name=gpu Type=a100 File=/dev/nvidia[0-1]\n"
        "NodeName=b1 Name=gpu Type=a100 File=/dev/nvidia0\nNodeName=b1 Name=gpu Type=t4 File=/dev/nvidia1\n"
        "NodeName=c1 Name=gpu Count=2\n"
    )
    nodes = parse_gres_conf(text)
    assert {name: node.gpu_type for name, node in nodes.items()} == {"a1": "a100", "b1": "", "c1": ""}


def test_lab_cluster_topology_conf() -> None:
    tree = parse_topology_conf(LAB_TOPOLOGY)
    assert tree.leaf_of == {"node1": "sw1", "node2": "sw1", "node3": "sw2", "node4": "sw2"}
    assert tree.parent == {"sw1": "spine", "sw2": "spine", "spine": None}
    assert tree.line_of == {"sw1": 1, "sw2": 2, "spine": 3}


def test_lab_cluster_topology_matches_the_quick_shape() -> None:
    """The Slurm lab cluster is ``uniform(4, 8, nodes_per_switch=2)`` with 4-link NVLink."""
    topo = topology_from_slurm(LAB_GRES, LAB_TOPOLOGY, nvlink_gbps_per_link=37.5)
    quick = uniform(4, 8, nodes_per_switch=2)
    assert [n.name for n in topo.nodes] == [n.name for n in quick.nodes]
    assert [n.links for n in topo.nodes] == [n.links for n in quick.nodes]
    assert [n.switch for n in topo.nodes] == [n.switch for n in quick.nodes]
    assert topo.switch_parent == quick.switch_parent
    assert topo.link(0, 8) == Link.NETWORK and topo.link(0, 16) == Link.SPINE
    # 4 links x 37.5 GB/s = the default 150 GB/s NVLink: same all-reduce times as the quick shape.
    for gpus in ([0, 1], [0, 1, 2, 3], [0, 4], [0, 1, 8, 9], [0, 16]):
        assert topo.allreduce_seconds(gpus, 2.0) == pytest.approx(quick.allreduce_seconds(gpus, 2.0))


def test_keys_case_insensitive_comments_ranges_and_no_links() -> None:
    text = """
    # two PCIe GPUs per socket, no NVLink
    nodename=box[1-2] NAME=gpu file=/dev/nvidia[0-1] CORES=0-11   # socket 0
    NodeName=box[1-2] Name=gpu File=/dev/nvidia[2-3] Cores=12-23
    NodeName=box[1-2] Name=mps Count=200
    NodeName=box1 AutoDetect=off
    """
    nodes = parse_gres_conf(text)
    assert list(nodes) == ["box1", "box2"]
    assert nodes["box1"].links[0] == (X, H, S, S)
    assert nodes["box1"].nvlink_bw is None


def test_no_cores_means_one_socket_and_count_lines() -> None:
    nodes = parse_gres_conf("NodeName=n1 Name=gpu Count=3\n")
    assert nodes["n1"].links == ((X, H, H), (H, X, H), (H, H, X))


def test_links_follow_device_file_order_not_line_order() -> None:
    text = """
    NodeName=n1 Name=gpu File=/dev/nvidia10 Links=2,0,-1
    NodeName=n1 Name=gpu File=/dev/nvidia2 Links=0,-1,0
    NodeName=n1 Name=gpu File=/dev/nvidia1 Links=-1,0,2
    """
    node = parse_gres_conf(text)["n1"]
    assert node.links[0] == (X, H, N)
    assert node.nvlink_bw is not None
    assert node.nvlink_bw[0][2] == 50.0


def test_lines_without_nodename_apply_to_topology_nodes() -> None:
    gres = "Name=gpu File=/dev/nvidia0 Links=-1,1\nName=gpu File=/dev/nvidia1 Links=1,-1\n"
    topo = topology_from_slurm(gres, "SwitchName=s Nodes=a[1-2]\n")
    assert [(n.name, n.switch, n.islands) for n in topo.nodes] == [("a1", "s", ((0, 1),)), ("a2", "s", ((0, 1),))]


def test_node_without_gres_lines_uses_gpus_per_node() -> None:
    topo = topology_from_slurm(
        LAB_GRES, LAB_TOPOLOGY + "SwitchName=sw3 Nodes=node[5-6]\n", gpus_per_node={"node[5-6]": 4}
    )
    assert [n.name for n in topo.nodes] == [f"node{i}" for i in range(1, 7)]
    assert topo.nodes[4].num_gpus == 4 and topo.nodes[4].islands == ((0, 1, 2, 3),)
    assert topo.nodes[4].switch == "sw3" and topo.switch_parent["sw3"] is None


def test_node_without_gres_or_count_is_an_error() -> None:
    with pytest.raises(TopologyParseError, match=r"^topology.conf:4: node node5 \(switch sw3\) has no Name=gpu lines"):
        topology_from_slurm(LAB_GRES, LAB_TOPOLOGY + "SwitchName=sw3 Nodes=node5\n")


def test_nodes_without_topology_conf_hang_from_sw0_in_natural_order() -> None:
    gres = "NodeName=n10 Name=gpu Count=1\nNodeName=n9 Name=gpu Count=2\n"
    topo = topology_from_slurm(gres, bandwidths=Bandwidths(network=1.0))
    assert [(n.name, n.switch) for n in topo.nodes] == [("n9", "sw0"), ("n10", "sw0")]
    assert topo.switch_parent == {"sw0": None}
    assert topo.bandwidths.network == 1.0


@pytest.mark.parametrize(
    ("gpus_per_node", "message"),
    [
        ({"node9": 8}, "gpus_per_node names node9, which neither"),
        ({"node1": 4}, "gpus_per_node gives node1 4 GPUs but gres.conf declares 8"),
        ({"node1": 0}, "must be a whole number from 1"),
    ],
)
def test_gpus_per_node_mistakes(gpus_per_node: dict[str, int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        topology_from_slurm(LAB_GRES, LAB_TOPOLOGY, gpus_per_node=gpus_per_node)


_L = "NodeName=n1 Name=gpu File=/dev/nvidia"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("NodeName=n1 Nme=gpu\n", r"^g.conf:1: unknown key 'Nme'; expected one of NodeName, Name"),
        ("NodeName=n1 gpu\n", r"^g.conf:1: expected Key=Value, found 'gpu'"),
        ("NodeName=n1 Name=gpu Name=gpu\n", r"^g.conf:1: Name= appears twice"),
        ("NodeName= Name=gpu\n", r"^g.conf:1: NodeName= has no value"),
        ("NodeName=n1 Type=h100\n", r"^g.conf:1: missing Name="),
        ("Name=gpu File=/dev/nvidia0\n", r"^g.conf:1: no NodeName="),
        ("NodeName=n[2-1] Name=gpu\n", r"^g.conf:1: NodeName=: .*reversed range"),
        ("NodeName=n1 Name=gpu File=/dev/nvidia[0-1] Links=-1,1\n", r"^g.conf:1: Links= describes one GPU"),
        ("NodeName=n1 Name=gpu Count=2 File=/dev/nvidia0\n", r"^g.conf:1: Count=2 but File= names 1"),
        ("NodeName=n1 Name=gpu Count=0\n", r"^g.conf:1: Count= must be at least 1"),
        ("NodeName=n1 Name=gpu Count=x\n", r"^g.conf:1: Count= must be a whole number"),
        ("NodeName=n1 Name=gpu Cores=3-1\n", r"^g.conf:1: Cores=: reversed range"),
        ("NodeName=n1 Name=gpu Cores=a\n", r"^g.conf:1: Cores=: bad range 'a'"),
        (f"{_L}0 Links=-1,-2\n", r"^g.conf:1: Links= values are -1"),
        (
            f"{_L}0 Links=-1,1\n{_L}1 Links=1,-1,0\n",
            r"^g.conf:2: node n1: Links= of /dev/nvidia1 has 3 entries but the node has 2 GPUs",
        ),
        (
            f"{_L}0 Links=-1,1\n{_L}1 Links=1,0\n",
            r"^g.conf:2: node n1: Links= of /dev/nvidia1 \(GPU 1\) has 0 at position 1; -1 belongs at position 1 only",
        ),
        (
            f"{_L}0 Links=-1,2\n{_L}1 Links=1,-1\n",
            r"^g.conf:2: node n1: GPU 1 \(/dev/nvidia1\) has 1 NVLinks to GPU 0 "
            r"but GPU 0 \(/dev/nvidia0, line 1\) has 2 back",
        ),
        (f"{_L}0 Links=-1,1\n{_L}1\n", r"^g.conf:2: node n1: /dev/nvidia1 has no Links= but other GPUs of the node do"),
        (
            f"{_L}0\nNodeName=n[0-1] Name=gpu File=/dev/nvidia0\n",
            r"^g.conf:2: node n1: /dev/nvidia0 is already declared on line 1",
        ),
        ("NodeName=n1 Name=gpu File=/dev/nvidia[0-1024]\n", r"^g.conf:1: 1025 GPUs on one line; at most 1024"),
        ("NodeName=n1 Name=gpu Count=99999999999\n", r"^g.conf:1: 99999999999 GPUs on one line"),
        (
            "NodeName=n1 Name=gpu File=/dev/nvidia[0-1000]\nNodeName=n1 Name=gpu File=/dev/nv[0-99]\n",
            r"^g.conf:2: node n1 has 1101 GPUs; at most 1024",
        ),
    ],
)
def test_gres_errors_name_file_and_line(text: str, message: str) -> None:
    with pytest.raises(TopologyParseError, match=message):
        parse_gres_conf(text, source="g.conf")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("SwitchName=a Nodes=n1\nSwitchName=a Nodes=n2\n", r"^t.conf:2: switch a is already defined on line 1"),
        (
            "SwitchName=a Nodes=n1\nSwitchName=b Nodes=n[1-2]\n",
            r"^t.conf:2: node n1 is under switch a \(line 1\) and b",
        ),
        ("SwitchName=a Switches=b\n", r"^t.conf:1: switch a lists switch b, which has no SwitchName=b line"),
        ("SwitchName=a Switches=a\n", r"^t.conf:1: switch a lists itself"),
        (
            "SwitchName=a Switches=c\nSwitchName=b Switches=c\nSwitchName=c\n",
            r"^t.conf:2: switch c is under a \(line 1\) and b",
        ),
        ("SwitchName=a Switches=b\nSwitchName=b Switches=a\n", r"^t.conf:1: switch a is its own ancestor"),
        ("Nodes=n1\n", r"^t.conf:1: missing SwitchName="),
        ("SwitchName=a LinkSpeed=fast\n", r"^t.conf:1: LinkSpeed= must be a whole number"),
        ("SwitchName=a LinkSpeed=0\n", r"^t.conf:1: LinkSpeed= must be positive"),
        ("SwitchName=s1 Nodes=n1\nBlockName=b1 Nodes=n2\n", r"^t.conf:1: a topology.conf of blocks \(BlockName=\) cannot"),
        ("BlockName=b1 Nodes=n[1-2]\nBlockSizes=2,3\n", r"^t.conf:2: BlockSizes value 3: each must be the first \(2\)"),
        ("BlockSizes=2\n", r"^t.conf:1: BlockSizes= but no BlockName= line"),
        ("BlockName=b1 Nodes=n[1-2]\nBlockSizes=x\n", r"^t.conf:2: BlockSizes value 0: each must be"),
        ("BlockName=b1 Switches=s1\n", r"^t.conf:1: Switches= is not a key of a block"),
        ("BlockName=b1 Nodes=n1\nBlockName=b1 Nodes=n2\n", r"^t.conf:2: block b1 is defined twice"),
        ("BlockName=b1\n", r"^t.conf:1: blocks hold no nodes and BlockSizes is not set"),
    ],
)
def test_topology_errors_name_file_and_line(text: str, message: str) -> None:
    with pytest.raises(TopologyParseError, match=message):
        parse_topology_conf(text, source="t.conf")


def test_topology_conf_link_speed_and_comments() -> None:
    tree = parse_topology_conf("# racks\nSwitchName=s1 Nodes=n[1-2] LinkSpeed=100  # EDR\nswitchname=top switches=s1\n")
    assert tree.link_speed == {"s1": 100}
    assert tree.parent == {"s1": "top", "top": None}


def test_rejects_non_positive_link_bandwidth() -> None:
    with pytest.raises(ValueError, match="nvlink_gbps_per_link"):
        parse_gres_conf(LAB_GRES, nvlink_gbps_per_link=-1.0)


def test_empty_gres_and_no_topology_is_an_error() -> None:
    with pytest.raises(TopologyParseError, match="^gres.conf: no Name=gpu lines"):
        topology_from_slurm("# nothing\nAutoDetect=nvml\n")


_GRES_FRAGMENTS = [
    "NodeName=n[1-2]", "NodeName=n1", "nodename=n[2-1]", "Name=gpu", "Name=mps", "File=/dev/nvidia0",
    "File=/dev/nvidia[0-1]", "File=/dev/nvidia1", "Links=-1,1", "Links=1,-1", "Links=-1,0", "Links=x",
    "Cores=0-3", "Cores=4-7", "Count=2", "Count=0", "AutoDetect=off", "Type=h100", "#", "=", "Bogus=1",
    " ", " ", "\n", "\n", "\n",
]
_TOPOLOGY_FRAGMENTS = [
    "SwitchName=s1", "SwitchName=s2", "SwitchName=top", "Nodes=n[1-2]", "Nodes=n2", "Switches=s[1-2]",
    "Switches=top", "LinkSpeed=10", "LinkSpeed=-1", "#", "[", " ", " ", "\n", "\n",
]


def _texts(fragments: list[str]) -> st.SearchStrategy[str]:
    return st.one_of(st.text(max_size=120), st.lists(st.sampled_from(fragments), max_size=40).map("".join))


@settings(max_examples=300)
@given(_texts(_GRES_FRAGMENTS), _texts(_TOPOLOGY_FRAGMENTS))
def test_arbitrary_text_parses_or_raises_parse_error(gres: str, topology: str) -> None:
    for parse in (lambda: parse_gres_conf(gres), lambda: parse_topology_conf(topology)):
        try:
            parse()
        except TopologyParseError:
            pass
    try:
        topo = topology_from_slurm(gres, topology)
    except TopologyParseError:
        return
    assert topo.num_gpus >= 1
