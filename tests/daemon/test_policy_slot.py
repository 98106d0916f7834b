"""The daemon's warm-up decision (`PolicySlot.warm_up`): a made-up state every policy can
decide on, on any cluster shape, so the first live cycle is not the policy's first call."""

from __future__ import annotations

import pytest

from attentived.agents.registry import make_policy
from attentived.daemon.policy_slot import _warm_up_state
from attentived.topology import uniform

SHAPES = [uniform(1, 1), uniform(2, 4), uniform(4, 8, nodes_per_switch=2), uniform(16, 8)]


@pytest.mark.parametrize("topo", SHAPES, ids=lambda t: f"{len(t.nodes)}x{t.num_gpus // len(t.nodes)}")
@pytest.mark.parametrize("name", ["fifo", "slurm", "portfolio", "attentive", "deeprm"])
def test_every_policy_decides_the_warm_up_state_validly(topo, name):
    state = _warm_up_state(topo)
    assert len(state.pending) == 4 and len(state.running) == 1
    assert all(j.job_id.startswith("warm-up") for j in (*state.pending, *state.running))
    assert len({j.user for j in state.pending}) == 2 and all(j.time_limit for j in state.pending)
    plan = make_policy(name).decide(state)
    taken = [g for s in plan.starts for g in s.gpus]
    assert len(taken) == len(set(taken)) and all(state.free[g] for g in taken)
    if topo.num_gpus > 1:
        assert plan.starts  # GPUs are free and small jobs wait: the policy's start path ran
