from __future__ import annotations

import numpy as np
import pytest

from attentived.agents.fit import Fit
from attentived.agents.order import Fifo
from attentived.agents.pack import PackedPlacer
from attentived.agents.placement import Consolidate, FirstFit
from attentived.agents.policy import Scheduler
from attentived.agents.registry import ALL, UnknownPolicy, make_policy
from attentived.agents.state import NodeCapacity, RunningJob
from attentived.topology import uniform

from .conftest import capacity, job, make_state


def _busy_cluster(lab):
    # 24 GPUs run until t=1000+600 (node1-3), node4 free: 8 free GPUs.
    return [RunningJob(f"r{k}", "x", tuple(range(8 * k, 8 * k + 8)), 0.0, 1000.0, 600.0) for k in range(3)]


def test_strict_order_holds_the_blocked_head_and_starts_nothing_behind_it(lab):
    s = make_state(lab, [job("head", gpus=16, submit=0), job("small", gpus=2, submit=1, limit=60)],
                   running=_busy_cluster(lab), now=1000)
    plan = Scheduler(Fifo(), Consolidate()).decide(s)
    assert plan.starts == ()
    assert plan.order == ("head", "small")
    (hold,) = plan.holds
    assert hold.job_id == "head" and len(hold.gpus) == 16 and hold.expected_start == 1600


def test_backfill_starts_short_jobs_that_end_before_the_hold(lab):
    s = make_state(lab, [job("head", gpus=16, submit=0), job("short", gpus=2, submit=1, limit=60),
                         job("long", gpus=2, submit=2, limit=36_000)], running=_busy_cluster(lab), now=1000)
    plan = Scheduler(Fifo(), Consolidate(), backfill=True).decide(s)
    started = [st.job_id for st in plan.starts]
    assert "short" in started
    hold = plan.holds[0]
    for st in plan.starts:
        if st.job_id == "long":  # a long job may only use GPUs the hold does not need
            assert not set(st.gpus) & set(hold.gpus)


def test_a_job_blocked_only_by_this_plans_starts_is_held_behind_them(lab):
    """An idle cluster: A (24 GPUs, 100 s) starts, the 32-GPU B fits only once A ends. B
    is held at A's end on every GPU, so the long C may not take A's leftover node and
    delay B by its whole limit; the short D, done before A ends, may."""
    s = make_state(lab, [job("A", gpus=24, submit=0, limit=100), job("B", gpus=32, submit=1, limit=100),
                         job("C", gpus=8, submit=2, limit=36_000), job("D", gpus=8, submit=3, limit=50)], now=1000)
    for placer in (Consolidate(), FirstFit(), PackedPlacer()):
        plan = Scheduler(Fifo(), placer, backfill=True).decide(s)
        assert [st.job_id for st in plan.starts] == ["A", "D"], placer
        (hold,) = plan.holds
        assert hold.job_id == "B" and len(hold.gpus) == 32 and hold.expected_start == 1100
    strict = Scheduler(Fifo(), Consolidate()).decide(s)
    assert [st.job_id for st in strict.starts] == ["A"] and [h.job_id for h in strict.holds] == ["B"]


def test_the_cpus_of_a_start_that_ends_before_the_hold_are_back_at_the_hold():
    """One node, 16 GPUs and CPUs. A (8 CPUs, 100 s) starts; B (8 CPUs) is held at A's end;
    the long C (1 CPU) fits beside B then (8 + 1 of 16 CPUs), so backfill starts it now.
    Counting A's CPUs as still taken at B's start kept C waiting 100 s for nothing."""
    topo = uniform(1, 16)
    s = make_state(topo, [job("A", gpus=10, submit=0, limit=100, cpus=8), job("B", gpus=8, submit=1, limit=100, cpus=8),
                          job("C", gpus=1, submit=2, limit=36_000, cpus=1)], now=1000, nodes=capacity(topo, cpus=16))
    for placer in (Consolidate(), FirstFit()):
        plan = Scheduler(Fifo(), placer, backfill=True).decide(s)
        assert [st.job_id for st in plan.starts] == ["A", "C"] and [h.job_id for h in plan.holds] == ["B"], placer


def test_an_exclusive_job_gives_each_node_back_whole_not_its_cpus_spread_by_gpus():
    """A runs exclusive on nodes of 64 and 32 CPUs. B (40 CPUs, not on the 64-CPU node)
    can never start: the 32-CPU node is all it may use. Spread by GPUs, A's 96 CPUs gave
    that node 48, B was held there, and in strict order nothing started behind it."""
    topo = uniform(3, 8)
    name = [n.name for n in topo.nodes]
    a = RunningJob("A", "x", tuple(range(16)), 0.0, 900.0, 100.0, cpus=96, exclusive=True)
    cap = NodeCapacity(cpus=np.array([0, 0, 4]), mem=np.full(3, 10**6), idle=np.array([False, False, True]),
                       gpu_type=("", "", ""), features=(frozenset(),) * 3,
                       total_cpus=np.array([64, 32, 4]), total_mem=np.full(3, 10**6))
    s = make_state(topo, [job("B", gpus=8, submit=1, cpus=40, exclude=(name[0],)), job("C", gpus=1, submit=2, cpus=1)],
                   running=[a], now=1000, nodes=cap)
    plan = Scheduler(Fifo(), Consolidate()).decide(s)
    assert plan.holds == () and [st.job_id for st in plan.starts] == ["C"]
    fit = Fit.of(s)
    fit.release(a)
    assert fit.cpus.tolist() == [64, 32, 4]


def test_a_job_that_can_never_fit_does_not_block_the_queue(lab):
    down = list(range(8, 32))  # three nodes down: only 8 GPUs exist now
    s = make_state(lab, [job("huge", gpus=16), job("ok", gpus=4, submit=1)], busy=down)
    plan = Scheduler(Fifo(), FirstFit()).decide(s)
    assert [st.job_id for st in plan.starts] == ["ok"]


def test_plan_starts_are_disjoint_and_free(lab):
    s = make_state(lab, [job(f"j{i}", gpus=g, submit=i) for i, g in enumerate([1, 2, 4, 8, 3, 5])])
    for name in ALL:
        plan = make_policy(name, seed=1).decide(s)
        seen = set()
        for st in plan.starts:
            assert not seen & set(st.gpus)
            seen |= set(st.gpus)
        assert sum(len(st.gpus) for st in plan.starts) <= 32


def test_unknown_policy_names_what_exists():
    with pytest.raises(UnknownPolicy, match="fifo"):
        make_policy("fastest")
    assert make_policy("sjf+load-balance+backfill").name == "sjf+load-balance+backfill"


def test_full_cluster_still_holds_gpus_for_the_head_job(lab):
    running = [RunningJob(f"r{k}", "x", tuple(range(8 * k, 8 * k + 8)), 0.0, 1000.0, 600.0 + k) for k in range(4)]
    s = make_state(lab, [job("head", gpus=4), job("next", gpus=1, submit=1)], running=running, now=1000)
    plan = Scheduler(Fifo(), Consolidate()).decide(s)
    assert plan.starts == ()
    (hold,) = plan.holds
    assert hold.job_id == "head" and hold.expected_start == 1600  # r0 ends first
    assert set(hold.gpus) <= set(range(8))


def test_running_jobs_come_back_in_order_of_expected_end_then_id(lab):
    import random

    rng = random.Random(3)
    now = 1000.0
    running = tuple(
        RunningJob(f"j{rng.randrange(50)}-{i}", "u", (i % lab.num_gpus,), 0.0, rng.uniform(0, now),
                   rng.choice([None, rng.uniform(1, 2000), float("inf")]))
        for i in range(60)
    )
    state = make_state(lab, now=now, running=running)
    expected = sorted(running, key=lambda r: (r.expected_end(now), r.job_id))
    assert list(state.running_by_end) == expected
    assert any(r.deadline <= now for r in running) and any(r.deadline > now for r in running)


def _hold_one_release_at_a_time(job_, free, state, placer):
    """`expected_hold` as it was: release running jobs one by one in order of expected end."""
    from attentived.agents.fit import Fit
    from attentived.agents.plan import Hold

    fit = Fit.of(state)
    future = free.copy()
    for run in state.running_by_end:
        future[list(fit.release(run))] = True
        if int(future.sum()) < job_.num_gpus:
            continue
        usable = fit.usable(job_, future)
        gpus = placer.place(job_, usable, state) if int(usable.sum()) >= job_.num_gpus else None
        if gpus is not None:
            return Hold(job_.job_id, tuple(int(g) for g in gpus), run.expected_end(state.now))
    return None


@pytest.mark.parametrize("seed", range(6))
def test_a_hold_that_skips_releases_short_of_the_job_matches_one_release_at_a_time(seed):
    import numpy as np

    from attentived.agents.policy import expected_hold
    from attentived.topology import uniform

    rng = np.random.default_rng(seed)
    topo = uniform(8, 8, nodes_per_switch=2)
    order = rng.permutation(64)
    running, at = [], 0
    while at < 60:
        n = int(rng.choice([1, 2, 4, 8]))
        running.append(RunningJob(f"r{at}", "x", tuple(sorted(int(g) for g in order[at:at + n])), 0.0,
                                  float(rng.uniform(0, 500)), float(rng.choice([600.0, 3600.0, 7200.0])),
                                  exclusive=bool(rng.random() < 0.1)))
        at += n
    s = make_state(topo, [job(f"p{g}", gpus=g, nodes=2 if g == 16 else None) for g in (1, 4, 8, 16, 24)], running=running)
    for placer in (Consolidate(), FirstFit(), PackedPlacer()):  # the packed one skips by a binary search
        for j in s.pending:
            assert expected_hold(j, s.free, s, placer) == _hold_one_release_at_a_time(j, s.free, s, placer)
