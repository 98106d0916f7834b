"""The GPU indices Slurm picks when a plan names only the nodes.

Slurm cannot be told which GPUs of a node a job gets: the daemon pins a job to nodes
(``ReqNodeList``) with its GPU count per node, and slurmctld's ``select/cons_tres`` then
chooses the indices itself. On the lab (Slurm 22.05, ``gres.conf`` with ``Links=``), a
multi-GPU job got the lowest free indices of its node even when that split it over both
NVLink islands (4 GPUs from free {3, 5, 6, 7}; from free {2, 3, 5, 6, 7}: 2, 3, 5, 6). A
replay that predicts the live daemon therefore keeps the policy's nodes and counts and
gives each start the lowest free GPUs there, as Slurm would.
"""

from __future__ import annotations

from collections import Counter

from attentived.agents.placement import lowest_free
from attentived.agents.plan import Plan, Start
from attentived.agents.policy import Policy
from attentived.agents.state import ClusterState

__all__ = ["SlurmPicksGpus"]


class SlurmPicksGpus:
    """``policy`` as Slurm carries out its plans: the same nodes and GPUs per node, the
    lowest free indices on each (see the module notes)."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.name = policy.name
        self.needs_oracle = policy.needs_oracle

    def decide(self, state: ClusterState) -> Plan:
        plan = self.policy.decide(state)
        topo = state.topology
        free = state.free.copy()
        starts = []
        for s in plan.starts:
            gpus: list[int] = []
            for node, count in sorted(Counter(int(topo.gpu_node[g]) for g in s.gpus).items()):
                gpus.extend(lowest_free(topo, free, node, count))
            free[gpus] = False
            starts.append(Start(s.job_id, tuple(sorted(gpus))))
        return Plan(order=plan.order, starts=tuple(starts), holds=plan.holds, waited=plan.waited)
