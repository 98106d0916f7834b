"""Small hand-built states for the decision-layer tests."""

from __future__ import annotations

import numpy as np
import pytest

from attentived.agents.state import ClusterState, PendingJob, RunningJob, UserStats
from attentived.topology import uniform


def make_state(
    topo,
    pending=(),
    busy=(),
    running=(),
    now=1000.0,
    users=None,
) -> ClusterState:
    free = np.ones(topo.num_gpus, dtype=bool)
    free[list(busy)] = False
    for r in running:
        free[list(r.gpus)] = False
    return ClusterState(now=now, topology=topo, free=free, pending=tuple(pending), running=tuple(running), users=users or {})


def job(job_id, gpus=1, user="alice", submit=0.0, limit=3600.0, nodes=None) -> PendingJob:
    return PendingJob(job_id=job_id, user=user, num_gpus=gpus, submit_time=submit, time_limit=limit, num_nodes=nodes)


@pytest.fixture
def lab():
    """The test cluster's shape: 4 nodes x 8 GPUs (islands 0-3, 4-7), 2 nodes per switch."""
    return uniform(4, 8, nodes_per_switch=2)


__all__ = ["make_state", "job", "RunningJob", "UserStats"]
