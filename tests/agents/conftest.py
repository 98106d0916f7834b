"""Small hand-built states for the decision-layer tests."""

from __future__ import annotations

import numpy as np
import pytest

from attentived.agents.state import ClusterState, NodeCapacity, PendingJob, RunningJob, UserStats
from attentived.topology import uniform


def make_state(
    topo,
    pending=(),
    busy=(),
    running=(),
    now=1000.0,
    users=None,
    nodes=None,
) -> ClusterState:
    free = np.ones(topo.num_gpus, dtype=bool)
    free[list(busy)] = False
    for r in running:
        free[list(r.gpus)] = False
    return ClusterState(now=now, topology=topo, free=free, pending=tuple(pending), running=tuple(running), users=users or {},
                        nodes=nodes)


def job(job_id, gpus=1, user="alice", submit=0.0, limit=3600.0, nodes=None, **requests) -> PendingJob:
    """``requests``: what Slurm checks besides GPUs (``cpus``, ``exclusive``, ``gpu_type``...)."""
    return PendingJob(job_id=job_id, user=user, num_gpus=gpus, submit_time=submit, time_limit=limit, num_nodes=nodes, **requests)


def capacity(topo, cpus=64, mem=512_000, idle=True, gpu_type="", features=()) -> NodeCapacity:
    """Each node's free CPUs, MB, idleness, GPU type and features: one value for all nodes
    or one per node."""
    n = len(topo.nodes)

    def each(v):
        return list(v) if isinstance(v, list | tuple) else [v] * n

    feats = features if features and not isinstance(features[0], str) else [features] * n
    return NodeCapacity(
        cpus=np.array(each(cpus), dtype=np.int64),
        mem=np.array(each(mem), dtype=np.int64),
        idle=np.array(each(idle), dtype=bool),
        gpu_type=tuple(each(gpu_type)),
        features=tuple(frozenset(f) for f in feats),
    )


def split_cases(topo):
    """Where agents split jobs over NVLink islands or nodes when one would do (issue 13,
    item 10), on the lab cluster. Each case: its name, the state (the first pending job is
    the one to place) and the spread level a tight placement has (1: one island, 2: one
    node, see ``Topology.spread``)."""

    def busy_except(free):
        return [RunningJob("r", "x", tuple(g for g in range(topo.num_gpus) if g not in free), 0.0, 500.0, 3600.0)]

    return [
        # node2 has 2-7 free: the 4-GPU job belongs on island 4-7 (12-15), not 2,5,6,7.
        ("four-on-island", make_state(topo, [job("four", 4), job("one", 1, submit=1)], running=busy_except(range(10, 16))), 1),
        # node1 has 3 and 7 free, node2 is empty: a 2-GPU job takes one of node2's islands.
        ("two-on-empty-node", make_state(topo, [job("two", 2)], running=busy_except({3, 7, *range(8, 16)})), 1),
        # node3 holds 3 GPUs (19-21): a 3-GPU job is not split over node1 and node2.
        ("three-on-one-node", make_state(topo, [job("three", 3)], running=busy_except({6, 7, 14, 15, 19, 20, 21, 30, 31})), 2),
    ]


def tight(topo, gpus, level) -> bool:
    """Whether ``gpus`` sit in one island (``level`` 1) or one node (2)."""
    islands, nodes, _ = topo.spread(gpus)
    return (islands if level == 1 else nodes) == 1


def short_and_long_waiters(topo) -> ClusterState:
    """24 of 32 GPUs busy for a day. Dana's one-minute jobs waited an hour each, Ed's
    day-long jobs two hours each; each has an 8-GPU job pending (Ed's older). By mean wait
    Ed is worse off, by slowdown (about 60x against 1.1x) Dana is."""
    running = [RunningJob(f"r{k}", "x", tuple(range(8 * k, 8 * k + 8)), 0.0, 900.0, 86_400.0) for k in range(3)]
    users = {"dana": UserStats(jobs=10, gpu_seconds=600.0, wait_seconds=10 * 3600.0, run_seconds=600.0,
                               limit_seconds=600.0, limited_jobs=10),
             "ed": UserStats(jobs=10, gpu_seconds=864_000.0, wait_seconds=10 * 7200.0, run_seconds=864_000.0,
                             limit_seconds=864_000.0, limited_jobs=10)}
    pending = [job("e", gpus=8, user="ed", submit=900.0, limit=86_400.0),
               job("d", gpus=8, user="dana", submit=950.0, limit=60.0)]
    return make_state(topo, pending, running=running, now=1000.0, users=users)


@pytest.fixture
def lab():
    """The test cluster's shape: 4 nodes x 8 GPUs (islands 0-3, 4-7), 2 nodes per switch."""
    return uniform(4, 8, nodes_per_switch=2)


def steer_job_agent(pol, logits: dict[int, float]):
    """``pol`` with its job agent's logits at these window slots (-1: WAIT) set to these
    values on every call: a network that ranks as a test needs, whatever its weights."""
    from attentived.agents.networks import JobEncoding

    def steer(_module, _inputs, enc: JobEncoding) -> JobEncoding:
        out = enc.logits.clone()
        for slot, value in logits.items():
            out[:, slot] = value
        return JobEncoding(enc.jobs, enc.context, out, enc.attention)

    pol.net.job_agent.register_forward_hook(steer)
    return pol


__all__ = ["make_state", "job", "capacity", "split_cases", "steer_job_agent", "tight", "RunningJob", "UserStats"]
