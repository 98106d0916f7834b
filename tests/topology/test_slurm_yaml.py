"""Slurm's topology.yaml (25.05 on): the cluster_default topology as the switch tree."""

from __future__ import annotations

from pathlib import Path

import pytest

from attentived.topology import TopologyParseError, hostlist, parse_topology_conf, topology_from_slurm
from attentived.topology.blocks import Blocks
from attentived.topology.slurm_yaml import parse_topology_yaml

FIXTURES = Path(__file__).parent / "fixtures"
LAB_GRES = (FIXTURES / "lab_gres.conf").read_text()
#: A topology.yaml slurmctld 26.05 read on the lab, with what it then showed (fixtures README)
RECORDED = Path(__file__).parents[1] / "daemon" / "fixtures" / "slurm-26.05"

TWO_TOPOLOGIES = """\
# the example of topology.yaml(5), with a block topology as the cluster's default
- topology: topo1
  cluster_default: false
  tree:
    switches:
      - switch: sw_root
        children: s[1-2]
      - switch: s1
        nodes: node[1-2]
      - switch: s2
        nodes: node[3-4]
- topology: topo2
  cluster_default: true
  block:
    block_sizes: [2]
    blocks:
      - block: b1
        nodes: node[1-3]
      - block: b2
        nodes: node4
"""


def _shown(text: str) -> tuple[dict[str, str], dict[str, str | None]]:
    """Leaf switch of each node and parent of each switch, from ``scontrol show topology``
    (tree: ``SwitchName= Level= Nodes= [Switches=]``, a switch listing every node below it;
    block: ``BlockName= Nodes=``)."""
    leaf_of: dict[str, str] = {}
    parent: dict[str, str | None] = {}
    for line in text.splitlines():
        f = dict(word.split("=", 1) for word in line.split())
        name = f.get("SwitchName") or f["BlockName"]
        parent.setdefault(name, None)
        for child in hostlist.expand(f["Switches"]) if "Switches" in f else ():
            parent[child] = name
        if f.get("Level", "0") == "0":
            leaf_of.update(dict.fromkeys(hostlist.expand(f["Nodes"]), name))
    return leaf_of, parent


def test_what_slurmctld_read_is_what_it_shows_and_its_own_dump_reads_the_same() -> None:
    leaf_of, parent = _shown((RECORDED / "scontrol-show-topology.txt").read_text())
    for name in ("topology.yaml", "scontrol-show-topoconf.yaml"):
        chosen = parse_topology_yaml((RECORDED / name).read_text(), source=name)
        assert (chosen.name, chosen.kind, chosen.tree.leaf_of, chosen.tree.parent) == ("racks", "tree", leaf_of, parent)
        assert "block topology nvl beside the default" in chosen.unmodelled
        # the block topology beside it, made the default: its blocks as slurmctld shows them
        swapped = (RECORDED / name).read_text().replace("cluster_default: true", "cluster_default: x").replace(
            "cluster_default: false", "cluster_default: true").replace("cluster_default: x", "cluster_default: false")
        blocks = parse_topology_yaml(swapped, source=name)
        shown_leaves, _ = _shown((RECORDED / "scontrol-show-topology-nvl.txt").read_text())
        assert (blocks.name, blocks.kind, blocks.tree.leaf_of) == ("nvl", "block", shown_leaves)


def test_a_tree_reads_as_topology_conf_does() -> None:
    text = TWO_TOPOLOGIES.replace("cluster_default: true", "cluster_default: false")  # none: the first
    chosen = parse_topology_yaml(text)
    assert (chosen.name, chosen.kind) == ("topo1", "tree")
    # a partition may name the block topology beside it (Topology=topo2): said, not planned
    assert chosen.unmodelled.startswith("block topology topo2 beside the default: a partition naming one")
    conf = parse_topology_conf("SwitchName=sw_root Switches=s[1-2]\nSwitchName=s1 Nodes=node[1-2]\n"
                               "SwitchName=s2 Nodes=node[3-4]\n")
    assert (chosen.tree.leaf_of, chosen.tree.parent) == (conf.leaf_of, conf.parent)
    topo = topology_from_slurm(LAB_GRES, chosen.tree)
    assert [n.switch for n in topo.nodes] == ["s1", "s1", "s2", "s2"]


def test_the_cluster_default_is_chosen_and_blocks_are_leaf_switches() -> None:
    chosen = parse_topology_yaml(TWO_TOPOLOGIES)
    assert (chosen.name, chosen.kind, chosen.unmodelled) == ("topo2", "block", "")
    assert chosen.tree.leaf_of == {"node1": "b1", "node2": "b1", "node3": "b1", "node4": "b2"}
    assert chosen.tree.parent == {"b1": "topo2", "b2": "topo2", "topo2": None}
    topo = topology_from_slurm(LAB_GRES, chosen.tree)
    assert [n.switch for n in topo.nodes] == ["b1", "b1", "b1", "b2"]
    # block_sizes: [2]: base blocks of 2 nodes, no aggregation; slurmctld plans by it
    assert topo.blocks == Blocks(("b1", "b2"), (("node1", "node2", "node3"), ("node4",)), 2, (0,))
    assert topo.node_block.tolist() == [0, 0, 0, 1]


def test_what_slurm_accepts_besides_lists_and_true() -> None:
    """Slurm's parser takes a mapping for a list of one (the file, ``switches``, ``blocks``),
    reads booleans as its data_parser does, and ignores ``flat: false`` beside a tree."""
    one = parse_topology_yaml("topology: t\ntree:\n  switches:\n    switch: s1\n    nodes: node[1-2]\n")
    assert (one.name, one.kind, one.tree.leaf_of) == ("t", "tree", {"node1": "s1", "node2": "s1"})
    blocks = parse_topology_yaml("- topology: b\n  block:\n    blocks: {block: b1, nodes: 'node[1-4]'}\n")
    assert blocks.tree.leaf_of == dict.fromkeys(("node1", "node2", "node3", "node4"), "b1")
    for value, default in (("on", "second"), ("y", "second"), ("1", "second"), ("maybe", "second"),
                           ("off", "first"), ("n", "first"), ("0", "first"), ("", "first")):
        text = f"- topology: first\n  flat: true\n- topology: second\n  cluster_default: {value}\n  flat: true\n"
        assert parse_topology_yaml(text).name == default, value
    tree = parse_topology_yaml("- topology: t\n  flat: false\n  tree:\n    switches:\n      - switch: s\n        nodes: n1\n")
    assert tree.kind == "tree"


def test_flat_is_one_switch_and_a_ring_is_read_as_flat_saying_so() -> None:
    flat = parse_topology_yaml("- topology: f\n  cluster_default: true\n  flat: true\n")
    assert flat.kind == "flat" and not flat.tree.leaf_of and not flat.unmodelled
    ring = parse_topology_yaml("- topology: r\n  ring:\n    rings:\n      - ring: r1\n        nodes: node[1-4]\n")
    assert ring.kind == "ring" and not ring.tree.leaf_of and "not modelled" in ring.unmodelled
    assert {n.switch for n in topology_from_slurm(LAB_GRES, ring.tree).nodes} == {"sw0"}


@pytest.mark.parametrize(("text", "line", "says"), [
    ("- topology: t\n  tree: {switches: [{switch: a, nodes: 'node[1-2]'}, {switch: a, nodes: node3}]}\n", 2,
     "switch a is already defined"),
    ("- topology: t\n  tree:\n    switches:\n      - switch: top\n        children: missing\n", 4,
     "has no SwitchName=missing"),
    ("- topology: t\n  tree:\n    switches:\n      - switch: a\n        nodes: node1\n      - switch: b\n"
     "        nodes: node1\n", 6, "node node1 is under switch a"),
    ("- topology: t\n  tree:\n    switches: []\n", 3, "must be a non-empty list"),
    ("- topology: t\n  tree: {switches: [{switch: a}]}\n  block: {blocks: [{block: b, nodes: n1}]}\n", 1,
     "exactly one of"),
    ("- topology: t\n  tree:\n    switches:\n      - switch: a\n        nodes: [node1, node2]\n", 5,
     "nodes: a hostlist string such as node\\[1-4\\], not a list"),
    ("- topology: t\n  tree:\n    switches:\n      - nodes: node1\n", 4, "switch: a name is required"),
    ("topology: t\n", 1, "exactly one of"),
    ("just words\n", 1, "expected a list of topologies"),
    ("- topology: t\n  tree: [unclosed\n", 3, "not YAML"),
    ("", None, "expected a list of topologies"),
])
def test_a_bad_file_names_its_line_and_what_is_wrong(text: str, line: int | None, says: str) -> None:
    with pytest.raises(TopologyParseError, match=says) as err:
        parse_topology_yaml(text, source="/etc/slurm/topology.yaml")
    assert err.value.line == line and str(err.value).startswith("/etc/slurm/topology.yaml")
