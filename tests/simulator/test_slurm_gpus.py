from __future__ import annotations

import dataclasses

import numpy as np

from attentived.agents.plan import Plan, Start
from attentived.agents.state import ClusterState, RunningJob
from attentived.simulator.slurm_gpus import SlurmPicksGpus
from attentived.topology import uniform


class _Fixed:
    """A policy whose plan is given: the starts the daemon would pin."""

    name = "fixed"
    needs_oracle = False

    def __init__(self, starts):
        self.starts = starts

    def decide(self, state):
        return Plan(order=[s.job_id for s in self.starts], starts=tuple(self.starts))


def test_without_cpu_counts_slurm_keeps_the_nodes_and_counts_and_takes_the_lowest_free_gpus():
    topo = uniform(2, 8, nodes_per_switch=2)
    free = np.ones(16, dtype=bool)
    free[[0, 1, 2, 12]] = False  # node1: 0-2 busy; node2: local 4 busy
    state = ClusterState(now=0.0, topology=topo, free=free, pending=(), running=())
    # the plan: 4 GPUs on node1's second island, then 1 on node1 and 3 on node2; no core
    # counts, so every socket ties and the lowest free GPUs go first: a splits its islands
    # (3 | 4, 5, 6), and b gets what is left lowest first
    plan = SlurmPicksGpus(_Fixed([Start("a", (4, 5, 6, 7)), Start("b", (3, 15, 14, 8))])).decide(state)
    assert plan.starts == (Start("a", (3, 4, 5, 6)), Start("b", (7, 8, 9, 10)))


def test_slurm_gets_a_passes_starts_largest_first_and_keeps_the_island():
    # the lab's attentived run, seed 13: node2 with GPU 0 busy (its core on socket 0); the
    # plan put a 1-GPU job on GPU 1 and a 4-GPU job on 4-7. Given the 1-GPU job first, Slurm
    # put its core on socket 1 (more free cores) and split the 4-GPU job (1, 2, 3 | 5);
    # largest first, each gets what the plan meant
    topo = uniform(2, 8, nodes_per_switch=2)
    topo = dataclasses.replace(topo, nodes=tuple(dataclasses.replace(n, cpus=8) for n in topo.nodes))
    busy = RunningJob("x", "u", (8,), 0.0, 0.0, 600.0, cpus=1)
    free = np.ones(16, dtype=bool)
    free[8] = False
    state = ClusterState(now=1.0, topology=topo, free=free, pending=(), running=(busy,))
    plan = SlurmPicksGpus(_Fixed([Start("one", (9,)), Start("four", (12, 13, 14, 15))])).decide(state)
    assert plan.starts == (Start("four", (12, 13, 14, 15)), Start("one", (9,)))
