from __future__ import annotations

import numpy as np

from attentived.agents.plan import Plan, Start
from attentived.agents.state import ClusterState
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


def test_slurm_keeps_the_nodes_and_counts_and_takes_the_lowest_free_gpus():
    topo = uniform(2, 8, nodes_per_switch=2)
    free = np.ones(16, dtype=bool)
    free[[0, 1, 2, 12]] = False  # node1: 0-2 busy; node2: local 4 busy
    state = ClusterState(now=0.0, topology=topo, free=free, pending=(), running=())
    # the plan: 4 GPUs on node1's second island, then 1 on node1 and 3 on node2
    plan = SlurmPicksGpus(_Fixed([Start("a", (4, 5, 6, 7)), Start("b", (3, 15, 14, 8))])).decide(state)
    # on the lab, Slurm gave such a job the lowest free indices (3, 5, 6, 7 of free {3, 5, 6, 7}):
    # here a splits its islands (3 | 4, 5, 6), and b gets what is left lowest first
    assert plan.starts == (Start("a", (3, 4, 5, 6)), Start("b", (7, 8, 9, 10)))
