"""Replays on a cluster with Slurm's block topology (a cluster file's ``[[blocks]]``): the
engine refuses a start off the rule, as slurmctld refuses the pin, and every policy's replay
runs through without one."""

from __future__ import annotations

from pathlib import Path

import pytest

from attentived.agents.plan import Plan, Start
from attentived.agents.registry import make_policy
from attentived.simulator.engine import PolicyError, SimJob, Simulation
from attentived.simulator.replay import replay
from attentived.simulator.trace import TraceJob, load_trace
from attentived.topology import parse_cluster_file

TIRESIAS = Path(__file__).parents[2] / "attentived" / "data" / "traces" / "tiresias-60.csv"

#: four 4-GPU nodes, blocks of two (BlockSizes=2: no aggregation, so a job of two nodes must
#: lie in one block; one of three nodes, larger than any block, may span both)
BLOCKS = """
block_sizes = [2]
[[nodes]]
names = "gpu[1-4]"
gpus = 4
[[blocks]]
name = "b1"
nodes = "gpu[1-2]"
[[blocks]]
name = "b2"
nodes = "gpu[3-4]"
"""


def test_a_start_across_blocks_is_refused():
    topo = parse_cluster_file(BLOCKS)
    assert topo.blocks is not None and topo.blocks.names == ("b1", "b2")
    jobs = [SimJob(TraceJob(j, 0.0, "u", 8, 100.0, None, 0), 100.0, "resnet50") for j in ("a", "b")]
    sim = Simulation(jobs, topo)
    sim.reset()
    sim.next_decision()
    with pytest.raises(PolicyError, match="start of job a: its nodes are not where Slurm's block topology lets a job of 2"):
        sim.apply(Plan(order=("a",), starts=(Start("a", tuple(range(4, 12))),)))  # gpu2 and gpu3: b1 and b2
    sim.apply(Plan(order=("a",), starts=(Start("a", (2, 3, 4, 5, 6, 7, 8, 9)),)))  # three nodes: any blocks
    sim.apply(Plan(order=("b",), starts=(Start("b", (0, 1, 10, 11, 12, 13, 14, 15)),)))


@pytest.mark.parametrize("name", ["fifo", "sjf+consolidate", "tiresias", "portfolio", "attentive"])
def test_every_policy_replays_a_trace_within_the_blocks(name):
    """The tiresias-60 trace (1 to 8 GPUs, half multi-GPU) on 4 x 4 GPUs in two blocks: a job
    on two nodes has both in one block; one on three or four may span both."""
    topo = parse_cluster_file(BLOCKS)
    result = replay(load_trace(TIRESIAS), topo, [make_policy(name)]).runs[name]
    assert len(result.result.records) == 60
    pairs = 0
    for r in result.result.records:
        nodes = sorted({int(topo.gpu_node[g]) for g in r.gpus})
        assert topo.blocks.allows(topo.node_block, nodes), (r.job_id, nodes)
        if len(nodes) == 2:
            assert topo.node_block[nodes[0]] == topo.node_block[nodes[1]]
            pairs += 1
    assert pairs >= 5
