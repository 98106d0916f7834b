"""Slurm's block topology (`attentived.topology.blocks`): the rule slurmctld allocates by,
checked against what a real slurmctld 24.11 did with pinned jobs."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from attentived.topology import hostlist, parse_topology_conf, topology_from_slurm
from attentived.topology.blocks import Blocks
from attentived.topology.describe import as_dict
from attentived.topology.slurm_yaml import parse_topology_yaml

FIXTURES = Path(__file__).parent / "fixtures"
RECORDINGS = Path(__file__).parents[1] / "daemon" / "fixtures"  # record_blocks.sh, per Slurm version
VERSIONS = ("24.11", "26.05")


def lab8(switch_file: str = "topology-block.conf", version: str = "24.11"):
    """The recorded block lab: node1-8 with the lab's GPUs; topology-block.conf's blocks of 2
    nodes and BlockSizes=2,4, or topology-block.yaml's three blocks with node7-8 in none."""
    gres = (FIXTURES / "lab_gres.conf").read_text().replace("node[1-4]", "node[1-8]")
    text = (RECORDINGS / f"slurm-{version}" / switch_file).read_text()
    tree = parse_topology_yaml(text).tree if switch_file.endswith(".yaml") else parse_topology_conf(text)
    return topology_from_slurm(gres, tree)


def recorded_pins(version: str, name: str = "block-pins.txt"):
    for line in (RECORDINGS / f"slurm-{version}" / name).read_text().splitlines():
        if line and not line.startswith("#"):
            args, pin, outcome = (part.strip() for part in line.split("|"))
            yield args, hostlist.expand(pin), outcome


@pytest.mark.parametrize("version", VERSIONS)
def test_the_recorded_topology_conf_reads_as_slurmctld_showed_it(version):
    topo = lab8(version=version)
    assert topo.blocks == Blocks(("b1", "b2", "b3", "b4"),
                                 tuple((f"node{2 * k + 1}", f"node{2 * k + 2}") for k in range(4)), 2, (0, 1))
    shown = (RECORDINGS / f"slurm-{version}" / "scontrol-show-topology-block.txt").read_text()
    for k, name in enumerate(topo.blocks.names):  # BlockName=b1 BlockIndex=0 Nodes=node[1-2] BlockSize=2
        assert f"BlockName={name} BlockIndex={k} Nodes={hostlist.compress(topo.blocks.members[k])} BlockSize=2" in shown
    assert "AggregatedBlock=b[1-2] BlockIndex=4 Nodes=node[1-4] BlockSize=4" in shown  # level 1: pairs
    assert [n.switch for n in topo.nodes] == ["b1", "b1", "b2", "b2", "b3", "b3", "b4", "b4"]


def test_the_recorded_topology_yaml_and_its_dump_read_alike():
    topo = lab8("topology-block.yaml", "26.05")
    assert topo.blocks == Blocks(("b1", "b2", "b3"), (("node1", "node2"), ("node3", "node4"), ("node5", "node6")),
                                 2, (0, 1, 2, 3, 4))  # no block_sizes: the first block's size, levels 0-4
    assert topo.node_block.tolist() == [0, 0, 1, 1, 2, 2, -1, -1]
    dumped = parse_topology_yaml((RECORDINGS / "slurm-26.05" / "scontrol-show-topoconf-block.yaml").read_text())
    assert dumped.tree.blocks == topo.blocks  # block_sizes: [] as topoconf prints it
    shown = (RECORDINGS / "slurm-26.05" / "scontrol-show-topology-block-yaml.txt").read_text()
    assert "AggregatedBlock=b[1-3] BlockIndex=4 Nodes=node[1-6] BlockSize=8" in shown  # level 2 is allowed


CASES = [(v, *case) for v in VERSIONS for case in recorded_pins(v)]


@pytest.mark.parametrize("version,args,pin,outcome", CASES, ids=lambda v: str(v)[:40])
def test_allows_says_what_slurmctld_did_with_each_pin(version, args, pin, outcome):
    topo = lab8(version=version)
    nodes = [topo.node_index[n] for n in pin]
    assert topo.blocks.allows(topo.node_block, nodes) == outcome.startswith("RUNNING"), (args, pin, outcome)


def test_the_recordings_hold_both_answers():
    outcomes = [o.split()[0] for v in VERSIONS for _, _, o in recorded_pins(v)]
    assert outcomes.count("RUNNING") >= 8 and outcomes.count("PENDING") >= 8


def test_what_allows_accepts_slurmctld_accepted_where_some_nodes_are_in_no_block():
    """On nodes in no block slurmctld accepted some pins (one node for a ``-N1`` job: 26.05
    skips blocks for a job of at most one node, `_get_one_res`; two for ``--gpus=16``) and
    refused others alike (``--gpus=8`` on one, ``-N2`` on two): `allows` refuses them all,
    the safe side, and agrees with every pin on nodes in blocks."""
    topo = lab8("topology-block.yaml", "26.05")
    answers = []
    for args, pin, outcome in recorded_pins("26.05", "block-pins-yaml.txt"):
        nodes = [topo.node_index[n] for n in pin]
        accepted = topo.blocks.allows(topo.node_block, nodes)
        if (topo.node_block[nodes] >= 0).all():
            assert accepted == outcome.startswith("RUNNING"), (args, pin, outcome)
        else:
            assert not accepted, (args, pin)
        answers.append((outcome.startswith("RUNNING"), (topo.node_block[nodes] >= 0).all()))
    assert {(True, True), (False, True), (True, False), (False, False)} <= set(answers)


def test_levels_follow_block_sizes():
    b = Blocks.of([f"b{k}" for k in range(8)], [[f"n{4 * k + i}" for i in range(4)] for k in range(8)], (4, 16))
    assert (b.base_nodes, b.levels) == (4, (0, 2))
    # (nodes) -> (level of its block, level of the llblocks inside, how many it may touch)
    assert [b.levels_for(n) for n in (1, 4, 5, 9, 16, 17)] == [
        (0, 0, 1), (0, 0, 1), (2, 0, 2), (2, 0, 3), (2, 0, 4), (-1, 2, 2)]
    default = Blocks.of(["a", "b"], [["n1", "n2", "n3"], ["n4"]])  # no BlockSizes: the first block's size, levels 0-4
    assert (default.base_nodes, default.levels) == (3, (0, 1, 2, 3, 4))
    # 17 of them: a job of 9 to 16 base blocks lies in one aligned group of 16 (level 4)
    many = Blocks.of([f"b{k}" for k in range(17)], [[f"n{k}"] for k in range(17)])
    assert many.levels_for(9) == (4, 3, 2) and many.levels_for(17) == (-1, 4, 2)
    node_block = np.arange(17)
    assert many.allows(node_block, range(16)) and not many.allows(node_block, range(1, 17))


@pytest.mark.parametrize("sizes,message", [((2, 3), "BlockSizes value 3"), ((2, 6), "BlockSizes value 6"),
                                           ((4, 0), "BlockSizes value 0"), ((1, 1 << 16), "BlockSizes value 65536")])
def test_block_sizes_slurm_refuses(sizes, message):
    with pytest.raises(ValueError, match=message):
        Blocks.of(["b1"], [["n1", "n2"]], sizes)


def _random_blocks(rng):
    count = int(rng.integers(1, 10))
    base = int(rng.integers(1, 4))
    sizes = (base, *sorted({base << int(k) for k in rng.integers(1, 4, size=int(rng.integers(0, 3)))}))
    members, node = [], 0
    for _ in range(count):
        size = int(rng.integers(0, base + 2))  # blocks may be short, long or empty
        members.append([f"n{node + i}" for i in range(size)])
        node += size
    outside = int(rng.integers(0, 3))  # nodes in no block
    node_block = np.array([k for k, m in enumerate(members) for _ in m] + [-1] * outside, dtype=np.int64)
    given = sizes if rng.random() < 0.8 or not node else ()  # without BlockSizes a block must hold nodes
    return Blocks.of([f"b{k}" for k in range(count)], members, given), node_block


def test_every_node_set_inside_a_region_passes():
    """`region` promises that any set of at least ``nodes`` nodes inside it is accepted:
    checked over random block topologies, room and job sizes, every such set where few."""
    rng = np.random.default_rng(7)
    checked = 0
    for _ in range(400):
        blocks, node_block = _random_blocks(rng)
        if not len(node_block):
            continue
        room = rng.integers(0, 5, size=len(node_block))
        least = int(rng.integers(1, len(node_block) + 1))
        inside = np.flatnonzero(blocks.region(node_block, room, int(rng.integers(1, 20)), least))
        assert (node_block[inside] >= 0).all()
        for size in range(least, min(len(inside), least + 3) + 1):
            for nodes in itertools.islice(itertools.combinations(inside.tolist(), size), 30):
                assert blocks.allows(node_block, nodes), (blocks, node_block.tolist(), least, nodes)
                checked += 1
    assert checked > 1000


def test_a_region_is_the_best_fitting_block_that_holds_the_job():
    blocks = Blocks.of([f"b{k}" for k in range(4)], [[f"n{2 * k}", f"n{2 * k + 1}"] for k in range(4)], (2,))
    node_block = np.repeat(np.arange(4), 2)
    room = np.array([8, 8, 8, 0, 8, 4, 0, 0])  # free GPUs: b0 16, b1 8, b2 12, b3 0
    pick = blocks.region(node_block, room, 10, 2)  # 10 GPUs on 2 nodes: b2 (12) fits tighter than b0 (16)
    assert np.flatnonzero(pick).tolist() == [4, 5]
    none = blocks.region(node_block, room, 20, 2)  # no block holds 20: the one holding most, where it cannot start
    assert np.flatnonzero(none).tolist() == [0, 1]


def test_the_json_description_names_the_blocks():
    assert as_dict(lab8())["blocks"] == {"blocks": {f"b{k + 1}": f"node[{2 * k + 1}-{2 * k + 2}]" for k in range(4)},
                                         "block_sizes": [2, 4]}
    assert as_dict(lab8("topology-block.yaml", "26.05"))["blocks"]["block_sizes"] == [2, 4, 8, 16, 32]
    tree = parse_topology_conf((FIXTURES / "lab_topology.conf").read_text())
    assert "blocks" not in as_dict(topology_from_slurm((FIXTURES / "lab_gres.conf").read_text(), tree))


def test_block_files_read_as_slurmctld_reads_them():
    """What slurmctld accepts (block_record.c, s_p_parse): BlockSizes on a block's line, set
    twice (the last wins), read by atoi; blocks sharing a node (their bitmaps ORed; it counts
    in the first); a topology.yaml block named as its topology."""
    tree = parse_topology_conf("BlockName=b1 Nodes=n[1-2] BlockSizes=9\nBlockName=b2 Nodes=n[2-4]\nBlockSizes=2x,4\n")
    assert tree.blocks == Blocks(("b1", "b2"), (("n1", "n2"), ("n2", "n3", "n4")), 2, (0, 1))
    assert tree.leaf_of == {"n1": "b1", "n2": "b1", "n3": "b2", "n4": "b2"}
    gres = "AutoDetect=off\nNodeName=n[1-4] Name=gpu File=/dev/nvidia[0-1]\n"
    assert topology_from_slurm(gres, tree).node_block.tolist() == [0, 0, 1, 1]
    same = parse_topology_yaml("- topology: nvl\n  block:\n    blocks:\n      - block: nvl\n        nodes: n[1-2]\n")
    assert same.tree.blocks is not None and same.tree.parent == {"nvl": "(nvl)", "(nvl)": None}
