"""A look-ahead plan holds for its instant (`agents.carried_plan`), and a plan reader sees it."""

from __future__ import annotations

from dataclasses import replace

from attentived.agents.carried_plan import carried
from attentived.agents.features import PLAN_FIRST, Context, FeatureEncoder
from attentived.agents.guided import look_ahead_teacher
from attentived.agents.plan import Plan, Start
from attentived.agents.state import RunningJob
from attentived.agents.two_phase import _started

from .conftest import job, make_state


def _queue(lab):
    running = [RunningJob("r", "x", tuple(range(16)), 0.0, 900.0, 3600.0)]
    pending = [job("big", gpus=16, submit=100.0, limit=7200.0), job("s1", gpus=4, submit=200.0, limit=900.0),
               job("s2", gpus=8, submit=300.0, limit=1800.0), job("s3", gpus=2, submit=400.0, limit=600.0)]
    return make_state(lab, pending, running=running)


def _start(state, start: Start):
    return _started(state, [j.job_id for j in state.pending].index(start.job_id), start.gpus)


def test_what_is_left_of_a_plan_after_its_own_starts_is_the_plan(lab):
    s = _queue(lab)
    plan = look_ahead_teacher(1.0).decide(s)
    assert len(plan.starts) >= 2, "the small jobs fit the 16 free GPUs"
    after = _start(s, plan.starts[0])
    rest = carried(plan, s, after)
    assert rest is not None and rest.starts == plan.starts[1:] and rest.holds == plan.holds
    assert plan.starts[0].job_id not in rest.order and len(rest.order) == len(plan.order) - 1
    for st in plan.starts[1:]:
        after = _start(after, st)
    done = carried(plan, s, after)
    assert done is not None and done.starts == ()  # every start made: the look-ahead's WAIT


def test_a_plan_is_not_carried_past_a_departure_from_it(lab):
    s = _queue(lab)
    plan = Plan(order=("s1", "s2", "big", "s3"), starts=(Start("s1", (16, 17, 18, 19)), Start("s2", tuple(range(24, 32)))))
    assert carried(plan, s, _start(s, Start("s3", (16, 17)))) is None  # a job the plan does not start now
    assert carried(plan, s, _start(s, Start("s1", (20, 21, 22, 23)))) is None  # the plan's job on other GPUs
    later = _start(replace(s, now=s.now + 1.0), plan.starts[0])
    assert carried(plan, s, later) is None  # the clock moved
    assert carried(plan, s, s) is None  # nothing started: that is a state to plan afresh


def test_a_plan_reader_sees_the_plans_jobs_even_outside_its_window(lab):
    """The window keeps the oldest half and the smallest jobs that fit; the plan's job,
    neither, is forced in and marked, and a job planned for later is not."""
    pending = [job(f"old{i}", gpus=32, submit=float(i)) for i in range(4)]  # cannot start: 16 free
    pending += [job(f"small{i}", gpus=1, submit=100.0 + i, limit=60.0) for i in range(4)]
    pending += [job("wanted", gpus=8, submit=200.0, limit=7200.0)]
    s = make_state(lab, pending, busy=range(16))
    encoder = FeatureEncoder(window=4)
    shown = [s.pending[int(i)].job_id for i in encoder.jobs(Context.of(s)).index]
    assert "wanted" not in shown
    encoder.planner = lambda state: Plan(order=("wanted",), starts=(Start("wanted", tuple(range(16, 24))),))
    view = encoder.jobs(Context.of(s))
    shown = [s.pending[int(i)].job_id for i in view.index]
    assert "wanted" in shown and view.plan[shown.index("wanted")] == PLAN_FIRST
    assert shown[:2] == ["old0", "old1"]  # the oldest half stays
