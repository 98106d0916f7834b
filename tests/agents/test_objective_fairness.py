"""The look-ahead cost's fairness setting W (issue 14): every term is non-decreasing in every
job's start, W = 0 ignores users, W > 0 favours the worst-off user, W outside [0, 1] is
refused, and decisions stay a function of (seed, state)."""

from __future__ import annotations

import math
import random
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attentived.agents.annealing import Annealing
from attentived.agents.genetic import Genetic
from attentived.agents.metaheuristic import Portfolio
from attentived.agents.objective import DEFAULT_FAIRNESS, LookAhead, SlowdownTable, Weights, fairness_weights
from attentived.agents.placement import Consolidate
from attentived.agents.policy import Scheduler
from attentived.agents.state import PendingJob, QueueArrays, RunningJob, UserStats

from .conftest import job, make_state, short_and_long_waiters
from .test_metaheuristic import crowded, states

ALL_CHOOSERS = (Genetic, Annealing, Portfolio)


def look(state, fairness, size=16, model="backfill"):
    return LookAhead(state, size, Weights(), SlowdownTable(state.topology), model, fairness=fairness)


def orders_of(la, rng, k=6):
    n = la.size
    out = [tuple(range(n))]
    for _ in range(k):
        out.append(tuple(rng.sample(range(n), n)))
    return [(o, tuple(rng.random() < 0.5 for _ in range(n))) for o in out]


@pytest.mark.parametrize("model", ["backfill", "serial"])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(state=states(), fairness=st.sampled_from([0.0, 0.3, DEFAULT_FAIRNESS, 1.0]), seed=st.integers(0, 99))
def test_the_cost_never_rewards_a_later_start(model, state, fairness, seed):
    # The cost of a modelled schedule is the sum of its terms at the schedule's starts
    # (`cost_at`), and delaying any one job never lowers it, whatever W.
    la = look(state, fairness, size=12, model=model)
    if la.size == 0:
        return
    assert all(w > 0 for w in la.fair_weight) and math.isclose(sum(la.fair_weight), la.size)
    rng = random.Random(seed)
    for order, pack in orders_of(la, rng, 3):
        sched = la.schedule(order, pack)
        if min(sched.start) < la.now:  # a job the model never starts (cost carries a penalty instead)
            continue
        base = la.cost_at(sched.start, sched.slowdown)
        assert base == pytest.approx(sched.cost, rel=1e-9, abs=1e-9)
        for i in range(la.size):
            later = list(sched.start)
            later[i] += rng.choice([1.0, 600.0, 86_400.0])
            assert la.cost_at(later, sched.slowdown) >= base - 1e-12


def with_waits(state, waits):
    """The same state with the users' finished jobs having waited ``waits[user]`` seconds
    each (their GPU time, hence the least-served order, unchanged)."""
    users = {u: UserStats(jobs=3, gpu_seconds=3600.0 * (k + 1), wait_seconds=3 * waits[u], run_seconds=3600.0)
             for k, u in enumerate(sorted(waits))}
    return make_state(state.topology, state.pending, running=state.running, now=state.now, users=users)


def test_no_fairness_ignores_how_long_users_waited(lab):
    base = crowded(lab, 40)
    calm = with_waits(base, {f"u{k}": 0.0 for k in range(5)})
    starved = with_waits(base, {f"u{k}": (20 * 3600.0 if k == 3 else 0.0) for k in range(5)})
    rng = random.Random(1)
    a, b = look(calm, 0.0), look(starved, 0.0)
    assert a.rows == b.rows
    for order, pack in orders_of(a, rng):
        assert a.evaluate(order, pack) == b.evaluate(order, pack)
        s = a.schedule(order, pack)
        assert s.cost == pytest.approx(s.jct_term + s.comm_term)
    ra = Portfolio(fairness=0.0).rank(calm)
    rb = Portfolio(fairness=0.0).rank(starved)
    assert np.array_equal(ra.order, rb.order) and ra.startable == rb.startable
    # ... and with W > 0 the starved user's jobs weigh more than anyone's.
    c = look(starved, 1.0)
    users = [starved.pending[r].user for r in c.rows]
    heavy = [w for w, u in zip(c.fair_weight, users) if u == "u3"]
    light = [w for w, u in zip(c.fair_weight, users) if u != "u3"]
    assert heavy and light and min(heavy) > max(light)


def two_users(lab):
    """24 GPUs busy for a day; 8 free. Bob (20 jobs so far, never waited) and Carol (two
    jobs that waited 10 hours each) each have an 8-GPU job pending: Bob's is shorter."""
    running = [RunningJob(f"r{k}", "x", tuple(range(8 * k, 8 * k + 8)), 0.0, 900.0, 86_400.0) for k in range(3)]
    users = {"bob": UserStats(jobs=20, gpu_seconds=20 * 3600.0, wait_seconds=0.0),
             "carol": UserStats(jobs=2, gpu_seconds=7200.0, wait_seconds=2 * 36_000.0)}
    pending = [job("b", gpus=8, user="bob", submit=900.0, limit=3600.0),
               job("c", gpus=8, user="carol", submit=950.0, limit=4 * 3600.0)]
    return make_state(lab, pending, running=running, now=1000.0, users=users)


@pytest.mark.parametrize("cls", ALL_CHOOSERS)
def test_the_knob_decides_who_goes_first(cls, lab):
    s = two_users(lab)
    started = {}
    for w in (0.0, 0.5, 0.75, 1.0):
        plan = Scheduler(cls(budget_ms=None, fairness=w), Consolidate()).decide(s)
        started[w] = [st.job_id for st in plan.starts]
    # Carol's weight is about 2, Bob's about 0 (mean 1): her urgency is 1 + W, his 1 - W.
    # Bob first costs (1 - W) * 1 h + (1 + W) * 5 h, Carol first (1 + W) * 4 h + (1 - W) * 5 h:
    # the shorter job goes first until W = 1/2, the worst-off user's after.
    assert started == {0.0: ["b"], 0.5: ["b"], 0.75: ["c"], 1.0: ["c"]}


@pytest.mark.parametrize("cls", ALL_CHOOSERS)
@pytest.mark.parametrize("bad", [-0.01, 1.01, float("nan"), 2])
def test_fairness_outside_the_unit_interval_is_refused(cls, bad, lab):
    with pytest.raises(ValueError, match="fairness"):
        cls(fairness=bad)
    with pytest.raises(ValueError, match="fairness"):
        look(two_users(lab), bad)


@pytest.mark.parametrize("cls", ALL_CHOOSERS)
def test_the_default_is_the_documented_constant(cls):
    assert cls().fairness == DEFAULT_FAIRNESS and 0.0 <= DEFAULT_FAIRNESS <= 1.0
    assert cls(fairness=0).fairness == 0.0 and cls(fairness=1).fairness == 1.0


@pytest.mark.parametrize("fairness", [0.0, 1.0])
@pytest.mark.parametrize("cls", ALL_CHOOSERS)
def test_deterministic_under_a_seed_at_any_fairness(cls, fairness, lab):
    s = with_waits(crowded(lab, 40), {f"u{k}": 3600.0 * k for k in range(5)})
    a = cls(seed=5, budget_ms=None, max_evaluations=120, fairness=fairness)
    b = cls(seed=5, budget_ms=None, max_evaluations=120, fairness=fairness)
    ra, rb = a.rank(s), b.rank(s)
    assert np.array_equal(ra.order, rb.order) and ra.startable == rb.startable
    assert a.last.evaluations == b.last.evaluations


def test_the_weighted_head_brings_the_worst_off_users_jobs_into_the_window(lab):
    # 60 short jobs of a user who never waited crowd the FIFO, shortest and least-served
    # heads; the starved user's longer jobs, submitted last, are in the window only with
    # W > 0 (by estimate / urgency they come first).
    running = [RunningJob(f"r{k}", "x", tuple(range(8 * k, 8 * k + 8)), 0.0, 900.0, 86_400.0) for k in range(4)]
    pending = [PendingJob(f"s{i}", "sam", 1, float(i), time_limit=600.0) for i in range(60)]
    pending += [PendingJob(f"l{i}", "lia", 8, 500.0 + i, time_limit=4 * 3600.0) for i in range(3)]
    users = {"sam": UserStats(jobs=50, gpu_seconds=100.0, wait_seconds=0.0),
             "lia": UserStats(jobs=2, gpu_seconds=9e6, wait_seconds=2 * 86_400.0)}
    s = make_state(lab, pending, running=running, now=1000.0, users=users)
    lia = {r for r, p in enumerate(s.pending) if p.user == "lia"}
    assert not lia & set(look(s, 0.0).rows)
    assert lia <= set(look(s, 1.0).rows)


def test_a_user_waiting_long_for_short_jobs_counts_as_worse_off(lab):
    """By mean wait Ed is worse off, by slowdown Dana is (`short_and_long_waiters`): her
    weight is the larger, and at W = 1 her job goes first though Ed's is older."""
    s = short_and_long_waiters(lab)
    la = look(s, 1.0)
    weight = dict(zip((s.pending[r].user for r in la.rows), la.fair_weight))
    assert weight["dana"] > 1.0 > weight["ed"]
    assert s.pending[int(Portfolio(fairness=1.0).rank(s).order[0])].job_id == "d"


def test_weights_ignore_users_with_nothing_pending(lab):
    """A replay's queue table lists every user of the workload, the daemon's only those with
    jobs pending: the same jobs get the same weights from both. Carl has nothing pending and
    long waits behind him; a slowdown mean taken over him too would lower Dana's ratio."""
    s = short_and_long_waiters(lab)
    carl = job("c", gpus=1, user="carl", submit=0.0, limit=60.0)
    table = QueueArrays.of([*s.pending, carl])
    rows = np.array([i for i, p in enumerate([*s.pending, carl]) if p.user != "carl"])
    users = {**s.users, "carl": UserStats(jobs=5, gpu_seconds=300.0, wait_seconds=5 * 86_400.0, run_seconds=300.0)}
    daemon = replace(s, users=users)
    replay = replace(s, users=users, queue_arrays=table.take(rows))
    assert replay.queue.users != daemon.queue.users  # the replay's table has carl, whose row is not in the queue
    ahead, est = np.zeros(2), np.array([86_400.0, 60.0])
    assert np.allclose(fairness_weights(replay, ahead, est), fairness_weights(daemon, ahead, est))
