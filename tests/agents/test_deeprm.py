"""The DeepRM-style baseline: legal plans, consolidated placement, determinism."""

from __future__ import annotations

import torch
from hypothesis import HealthCheck, given, settings

from attentived.agents.deeprm import DeepRMPolicy
from attentived.agents.mlp import DeepRMNet, MlpConfig
from attentived.agents.placement import Consolidate
from attentived.agents.policy import Policy

from .conftest import RunningJob, job, make_state
from .test_metaheuristic import check_plan, states


def _policy(seed=0, **kw) -> DeepRMPolicy:
    torch.manual_seed(seed)
    return DeepRMPolicy(DeepRMNet(10, MlpConfig(hidden=32)), **kw)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(state=states())
def test_every_plan_is_feasible(state):
    check_plan(state, _policy().decide(state))


def test_is_a_policy_that_places_like_consolidate(lab):
    p = _policy()
    assert isinstance(p, Policy)
    s = make_state(lab, [job("a", 4), job("b", 2, submit=1.0), job("c", 8, submit=2.0)], busy=(0, 1, 8))
    plan = p.decide(s)
    assert plan.starts  # nothing runs, so WAIT is masked: something starts on an idle-ish cluster
    free = s.free.copy()
    pending = {j.job_id: j for j in s.pending}
    for start in plan.starts:  # each start is what Consolidate picks on what was left
        assert start.gpus == Consolidate().place(pending[start.job_id], free, s)
        free[list(start.gpus)] = False


def test_decisions_are_deterministic_and_sampling_is_seeded(lab):
    running = [RunningJob("r", "bob", tuple(range(16)), 0.0, 500.0, 3600.0)]
    s = make_state(lab, [job(f"j{i}", 1 + i % 4, user=f"u{i % 3}", submit=float(i)) for i in range(14)], running=running)
    assert _policy().decide(s) == _policy().decide(s)
    a, b = _policy(deterministic=False, seed=0), _policy(deterministic=False, seed=0)
    assert [a.decide(s) for _ in range(3)] == [b.decide(s) for _ in range(3)]
