from __future__ import annotations

import pytest

from attentived.agents.order import Fifo
from attentived.agents.placement import Consolidate, FirstFit
from attentived.agents.policy import Scheduler
from attentived.agents.registry import ALL, UnknownPolicy, make_policy
from attentived.agents.state import RunningJob

from .conftest import job, make_state


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
