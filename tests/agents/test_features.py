from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attentived.agents.features import (
    CANDIDATE_FEATURES,
    GENERATORS,
    JOB_FEATURES,
    NEIGHBOURHOOD_NODES,
    NODE_FEATURES,
    SUMMARY_FEATURES,
    SUMMARY_TOKENS,
    Context,
    FeatureEncoder,
    candidates,
    job_urgency,
    select_window,
)
from attentived.agents.objective import fairness_weights
from attentived.agents.state import PendingJob
from attentived.topology import uniform

from .conftest import RunningJob, UserStats, job, make_state, split_cases, tight


def _exists_placement(j: PendingJob, free: np.ndarray, topo) -> bool:
    """Brute force: is there any legal GPU set for ``j`` on ``free``?"""
    if j.num_nodes is None:
        return int(free.sum()) >= j.num_gpus
    per = j.num_gpus // j.num_nodes
    node_free = np.bincount(topo.gpu_node, weights=free, minlength=len(topo.nodes))
    return int((node_free >= per).sum()) >= j.num_nodes


def _legal(j: PendingJob, gpus: tuple[int, ...], free: np.ndarray, topo) -> bool:
    if len(gpus) != j.num_gpus or len(set(gpus)) != len(gpus) or not free[list(gpus)].all():
        return False
    if j.num_nodes is not None:
        per_node = Counter(int(topo.gpu_node[g]) for g in gpus)
        return len(per_node) == j.num_nodes and set(per_node.values()) == {j.num_gpus // j.num_nodes}
    return True


@st.composite
def states(draw):
    nodes = draw(st.integers(1, 6))
    gpn = draw(st.sampled_from([1, 2, 4, 8]))
    topo = uniform(nodes, gpn, nodes_per_switch=draw(st.integers(1, 3)))
    busy = draw(st.sets(st.integers(0, topo.num_gpus - 1), max_size=topo.num_gpus))
    busy = sorted(busy)
    # Some busy GPUs belong to running jobs (with or without limits), the rest are down.
    split = draw(st.integers(0, len(busy)))
    running = [
        RunningJob(f"r{g}", "bob", (g,), 0.0, 500.0, draw(st.sampled_from([None, 600.0, 86_400.0])))
        for g in busy[:split]
    ]
    pending = []
    for i in range(draw(st.integers(1, 90))):
        gpus = draw(st.integers(1, topo.num_gpus))
        shaped = draw(st.booleans()) and gpus % gpn == 0 and gpus >= gpn
        nn = draw(st.integers(1, gpus // gpn)) if shaped else None
        if nn is not None and gpus % nn:
            nn = None
        pending.append(
            PendingJob(f"j{i}", draw(st.sampled_from(["alice", "bob", "carol"])), gpus, float(i),
                       draw(st.sampled_from([None, 900.0, 7200.0])), num_nodes=nn, model=draw(st.sampled_from([None, "bert", "ncf", "nope"])))
        )
    return make_state(topo, pending, busy=busy[split:], running=running, now=1000.0)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(states(), st.sampled_from([4, 16, 64]))
def test_masks_offer_exactly_the_feasible_jobs_and_only_legal_gpu_sets(state, window):
    enc = FeatureEncoder(window=window)
    ctx = Context.of(state)
    view = enc.jobs(ctx)
    topo = state.topology
    assert view.jobs.shape == (window, JOB_FEATURES) and np.isfinite(view.jobs).all()
    assert view.summary.shape == (SUMMARY_TOKENS, SUMMARY_FEATURES) and np.isfinite(view.summary).all()
    for slot in range(window):
        if not view.valid[slot]:
            assert not view.feasible[slot] and view.index[slot] == -1
            continue
        j = state.pending[int(view.index[slot])]
        assert view.feasible[slot] == _exists_placement(j, state.free, topo)
        if view.feasible[slot]:
            gv = enc.gpus(ctx, j)
            assert gv.valid.sum() == len(gv.placements) >= 1
            assert gv.nodes.shape == (len(topo.nodes), NODE_FEATURES)
            assert gv.candidates.shape == (enc.max_candidates, CANDIDATE_FEATURES)
            assert np.isfinite(gv.candidates).all() and np.isfinite(gv.nodes).all()
            for k, c in enumerate(gv.placements):
                assert _legal(j, c.gpus, state.free, topo), (j, c)
                assert np.isclose(gv.share[k].sum(), 1.0)
        else:
            assert candidates(j, ctx) == []
    # WAIT: never while nothing runs, unless nothing can start at all.
    mask = view.action_mask
    assert mask[window] == (bool(state.running) or not ctx.feasible.any())
    # Some action is always legal.
    assert mask.any()
    # A job that can start is in the window whenever one exists.
    assert view.feasible.any() == ctx.feasible.any()


def test_window_keeps_the_oldest_and_the_startable_smallest(lab):
    pending = [job(f"old{i}", gpus=32, submit=i) for i in range(40)]  # cannot start: 16 free
    pending += [job(f"small{i}", gpus=1, submit=100 + i, limit=60.0 * (50 - i)) for i in range(40)]
    s = make_state(lab, pending, busy=range(16))
    ctx = Context.of(s)
    idx = select_window(ctx, 16)
    names = [s.pending[i].job_id for i in idx]
    assert names[:8] == [f"old{i}" for i in range(8)]  # half: the longest waiting
    assert sorted(names[8:]) == sorted(f"small{i}" for i in range(32, 40))  # half: smallest startable
    assert len(set(idx)) == 16
    forced = select_window(ctx, 16, include=[s.pending.index(next(j for j in s.pending if j.job_id == "small0"))])
    assert "small0" in [s.pending[i].job_id for i in forced] and len(forced) == 16


def test_job_features_reflect_waiting_limits_and_users(lab):
    users = {"alice": UserStats(jobs=4, gpu_seconds=1e6, wait_seconds=400.0, run_seconds=100.0, limit_seconds=400.0, limited_jobs=4)}
    s = make_state(
        lab,
        [job("a", gpus=1, submit=0.0, limit=3600.0), job("b", gpus=8, user="bob", submit=900.0, limit=None)],
        now=1000.0,
        users=users,
    )
    view = FeatureEncoder().jobs(Context.of(s))
    a, b = view.jobs[0], view.jobs[1]
    assert a[3] > b[3]  # a waited longer
    assert a[4] == 1 and b[4] == 0  # limit present / absent
    assert a[10] == 0.25 and a[11] == 1  # alice used a quarter of her limits
    assert a[7] == 1.0 and b[7] == 0.0  # all attained service is alice's
    assert b[0] > a[0]  # more GPUs


def test_urgency_is_the_log_of_the_look_aheads_fairness_weight(lab):
    """Carol waited 10 hours per job, Bob never: her job's urgency is above his, both are
    the log of `fairness_weights` over 4 (clipped), and padded slots read 0."""
    running = [RunningJob(f"r{k}", "x", tuple(range(8 * k, 8 * k + 8)), 0.0, 900.0, 86_400.0) for k in range(3)]
    users = {"bob": UserStats(jobs=20, gpu_seconds=20 * 3600.0, wait_seconds=0.0),
             "carol": UserStats(jobs=2, gpu_seconds=7200.0, wait_seconds=2 * 36_000.0)}
    pending = [job("b", gpus=8, user="bob", submit=900.0, limit=3600.0),
               job("c", gpus=8, user="carol", submit=950.0, limit=4 * 3600.0)]
    s = make_state(lab, pending, running=running, now=1000.0, users=users)
    ctx = Context.of(s)
    assert not FeatureEncoder(window=4).jobs(ctx).urgency.any()  # only filled when asked for
    view = FeatureEncoder(window=4, urgency=True).jobs(ctx)
    weights = fairness_weights(s, np.zeros(2), ctx.estimate)  # both fit now: nothing ahead of them
    assert view.urgency[:2] == pytest.approx(np.clip(np.log(weights) / 4.0, -3.0, 3.0), abs=1e-6)
    assert view.urgency[0] < -1.0  # Bob never waited: his weight is below e^-4 (his slowdown, 1, bounds it)
    assert view.urgency[1] > 0 > view.urgency[0] and (view.urgency[2:] == 0).all()
    assert np.array_equal(job_urgency(ctx), view.urgency[:2])


def test_candidates_are_distinct_and_name_their_generators(lab):
    running = [RunningJob("r", "x", (0, 1, 2), 0.0, 900.0, 3600.0)]
    s = make_state(lab, [job("j", gpus=4)], running=running)
    ctx = Context.of(s)
    cands = candidates(s.pending[0], ctx)
    sets = [c.gpus for c in cands]
    assert len(sets) == len(set(sets)) >= 2
    assert all(src in GENERATORS for c in cands for src in c.sources)
    # Whole free islands hold the job, so every candidate is one island: first-fit's
    # (3, 4, 5, 6) across two islands is not offered.
    assert all(s.topology.spread(c.gpus)[0] == 1 for c in cands)
    assert {"consolidate", "load-balance", "best-fit-node", "best-fit-switch"} <= {src for c in cands for src in c.sources}
    assert "first-fit" not in {src for c in cands for src in c.sources}


def test_candidates_carry_the_speed_models_price(lab):
    s = make_state(lab, [PendingJob("j", "a", 4, 0.0, 3600.0, model="bert")], busy=[0, 1, 2, 8, 9, 10, 16, 17])
    enc = FeatureEncoder()
    ctx = Context.of(s)
    gv = enc.gpus(ctx, s.pending[0])
    speed = enc.speed(s.topology)
    for k, c in enumerate(gv.placements):
        assert c.slowdown == speed.slowdown("bert", c.gpus)
        assert np.isclose(gv.candidates[k, 0], np.log(c.slowdown))
    slow = {s.topology.spread(c.gpus)[1]: c.slowdown for c in gv.placements}
    assert slow[1] < max(slow.values()) or len(slow) == 1  # one node is never the worst
    assert enc.comm_ratio(s.pending[0], s.topology) > enc.comm_ratio(PendingJob("k", "a", 8, 0.0, model="googlenet"), s.topology)


def test_candidates_never_split_a_job_a_tighter_set_holds(lab):
    for name, s, level in split_cases(lab):
        cands = candidates(s.pending[0], Context.of(s))
        assert cands and all(tight(lab, c.gpus, level) for c in cands), (name, [c.gpus for c in cands])


def test_candidates_leave_whole_islands_for_bigger_jobs(lab):
    # Island 0 has GPU 3 free, every other island is whole: a 1-GPU job is offered GPU 3
    # only, not a GPU that would break a whole island.
    s = make_state(lab, [job("one", 1)], busy=[0, 1, 2])
    assert [c.gpus for c in candidates(s.pending[0], Context.of(s))] == [(3,)]


def test_node_rows_of_some_switches_are_the_whole_views_rows(lab):
    """The hierarchical view's rows are exactly the full view's rows of those nodes."""
    from attentived.agents.features import _node_rows

    rng = np.random.default_rng(3)
    running = [RunningJob(f"r{k}", "x", (2 * k, 2 * k + 1), 0.0, 100.0 * k, 600.0 * (k + 1)) for k in range(0, 16, 3)]
    s = make_state(lab, [job("j", gpus=2)], running=running, busy=tuple(int(g) for g in rng.choice(32, 4, replace=False)
                                                                         if not any(g in r.gpus for r in running)))
    ctx = Context.of(s)
    full = _node_rows(ctx, np.arange(4))
    for shown in (np.array([0, 1]), np.array([2, 3]), np.arange(4)):
        assert np.array_equal(_node_rows(ctx, shown), full[shown])


def test_a_large_cluster_shows_the_gpu_agent_the_candidates_switches():
    big = uniform(NEIGHBOURHOOD_NODES + 32, 8, nodes_per_switch=4)
    small = uniform(NEIGHBOURHOOD_NODES, 8, nodes_per_switch=4)
    s = make_state(big, [job("j", gpus=2)])
    view = FeatureEncoder().gpus(Context.of(s), s.pending[0])
    touched = {int(big.gpu_switch[g]) for c in view.placements for g in c.gpus}
    assert {int(big.node_switch[n]) for n in view.shown} == touched
    assert len(view.shown) == 4 * len(touched) and view.nodes.shape == (len(view.shown), NODE_FEATURES)
    assert view.share.shape[1] == len(view.shown) and np.allclose(view.share[view.valid].sum(1), 1.0)
    s = make_state(small, [job("j", gpus=2)])
    assert len(FeatureEncoder().gpus(Context.of(s), s.pending[0]).shown) == NEIGHBOURHOOD_NODES


def test_the_plan_marks_the_look_aheads_first_start_its_other_starts_and_wait(lab):
    """A view built with a planner marks the job the look-ahead starts first, the other
    jobs it starts now, and nothing else; when the plan starts nothing, WAIT is marked.
    Without a planner every mark is 0, and the plan is computed once per snapshot."""
    from attentived.agents.features import PLAN_FIRST, PLAN_LATER
    from attentived.agents.guided import look_ahead_teacher

    running = [RunningJob("r", "x", tuple(range(16)), 0.0, 900.0, 3600.0)]
    pending = [job("big", gpus=16, submit=100.0, limit=7200.0), job("s1", gpus=4, submit=200.0, limit=900.0),
               job("s2", gpus=8, submit=300.0, limit=1800.0)]
    s = make_state(lab, pending, running=running)
    encoder = FeatureEncoder(window=4)
    assert not encoder.jobs(Context.of(s)).plan.any() and encoder.plan_of(s) is None
    encoder.planner = look_ahead_teacher(0.0).decide
    plan = encoder.plan_of(s)
    assert plan is not None
    assert encoder.plan_of(s) is plan  # once per snapshot
    view = encoder.jobs(Context.of(s))
    assert plan.starts, "two small jobs fit the 16 free GPUs"
    marks = {s.pending[int(i)].job_id: float(view.plan[slot]) for slot, i in enumerate(view.index) if i >= 0}
    assert marks[plan.starts[0].job_id] == PLAN_FIRST
    assert all(marks[st.job_id] == PLAN_LATER for st in plan.starts[1:])
    assert sum(m > 0 for m in marks.values()) == len(plan.starts) and view.plan[-1] == 0.0
    assert not view.plan[3:-1].any()  # the padded slot

    full = make_state(lab, [job("big", gpus=24, submit=100.0)], running=running)
    waiting = encoder.jobs(Context.of(full))
    full_plan = encoder.plan_of(full)
    assert full_plan is not None and full_plan.starts == ()
    assert waiting.plan[-1] == PLAN_FIRST and not waiting.plan[:-1].any()
