"""The GPU indices Slurm picks when a plan names only the nodes.

Slurm cannot be told which GPUs of a node a job gets: the daemon pins a job to nodes
(``ReqNodeList``) with its GPU count per node, and slurmctld's ``select/cons_tres`` then
chooses the core and the indices itself (`agents.slurm_select`: the socket with the most
free cores among those with a free GPU, its GPUs first). A replay that predicts the live
daemon therefore keeps the policy's nodes and counts and gives each start the GPUs Slurm
would. Early lab notes saw 4-GPU jobs split over both NVLink islands (from free
{2, 3, 5, 6, 7}: 2, 3, 5, 6) and took the lowest free indices for the rule; the sockets'
cores decide it: there the lower socket had as many free cores as the other.
"""

from __future__ import annotations

from collections import Counter

from attentived.agents.plan import Plan, Start
from attentived.agents.policy import Policy
from attentived.agents.slurm_select import SlurmSelect, start_order
from attentived.agents.state import ClusterState

__all__ = ["SlurmPicksGpus"]


class SlurmPicksGpus:
    """``policy`` as Slurm carries out its plans: the same nodes and GPUs per node, the GPUs
    there as ``select/cons_tres`` picks them. ``select`` holds which socket's cores each
    running job has: share one between every wrapper of the same replay."""

    def __init__(self, policy: Policy, select: SlurmSelect | None = None) -> None:
        self.policy = policy
        self.select = select if select is not None else SlurmSelect()
        self.name = policy.name
        self.needs_oracle = policy.needs_oracle

    def decide(self, state: ClusterState) -> Plan:
        plan = self.policy.decide(state)
        topo = state.topology
        free = state.free.copy()
        cpus = {j.job_id: j.cpus for j in state.pending}
        starts = []
        for s in start_order(plan.starts):  # the daemon's priorities: Slurm's start order
            nodes = sorted(Counter(int(topo.gpu_node[g]) for g in s.gpus).items())
            gpus = self.select.gpus(s.job_id, cpus.get(s.job_id, 0), nodes, free, state)
            free[list(gpus)] = False
            starts.append(Start(s.job_id, gpus))
        return Plan(order=plan.order, starts=tuple(starts), holds=plan.holds, waited=plan.waited)
