"""A look-ahead plan holds for its whole decision instant.

The look-ahead (`Portfolio`) plans every job it starts now at once, and a replay of it
starts them together. A policy that starts one job per step (the attentive agents' decision
loop, the training environment) and asked the look-ahead afresh after each start followed
another policy: the look-ahead re-planned on a queue it had just changed, and its next
first job was often not its plan's next start. On the knob bench at W = 1 that re-planned
look-ahead left the worst-off user 16% longer than the look-ahead itself, and a student
that copied it step by step, however exactly, inherited the loss (docs/agents.md, "A plan
holds for its instant"). So a plan is carried: while the state is the plan's own with some
of its starts made, on its GPUs and at the same instant, what is left of it is the plan.
"""

from __future__ import annotations

from collections.abc import Callable

from .plan import Plan
from .state import ClusterState


def plan_at(state: ClusterState, last: tuple[ClusterState, Plan] | None,
            planner: Callable[[ClusterState], Plan]) -> Plan:
    """The plan for ``state`` given the ``last`` (state, plan) its caller kept: that plan
    for the same snapshot, what is left of it when ``state`` carries it (`carried`), else
    ``planner``'s fresh plan. One rule for the model's plan and the teacher's labels."""
    if last is not None:
        if last[0] is state:
            return last[1]
        kept = carried(last[1], last[0], state)
        if kept is not None:
            return kept
    return planner(state)


def carried(plan: Plan, before: ClusterState, after: ClusterState) -> Plan | None:
    """What is left of ``plan`` (made for ``before``) in ``after``, or ``None`` when
    ``after`` is not ``before`` with some of the plan's starts made on the plan's GPUs at
    the same instant (another job started, a start took other GPUs, the clock moved, a job
    ended or arrived): then the look-ahead must plan afresh. With every start made, what
    is left starts nothing and keeps the plan's holds: the look-ahead's WAIT."""
    if after.now != before.now or after.topology is not before.topology:
        return None
    made = len(before.pending) - len(after.pending)
    if made <= 0 or len(after.running) != len(before.running) + made:
        return None
    planned = {s.job_id: tuple(sorted(s.gpus)) for s in plan.starts}
    left = {j.job_id for j in after.pending}
    gone = [j.job_id for j in before.pending if j.job_id not in left]
    if len(gone) != made or any(g not in planned for g in gone):
        return None
    done = set(gone)
    ran = {r.job_id: tuple(sorted(r.gpus)) for r in after.running if r.job_id in done}
    if any(ran.get(g) != planned[g] for g in gone):
        return None
    return Plan(
        order=tuple(j for j in plan.order if j not in done),
        starts=tuple(s for s in plan.starts if s.job_id not in done),
        holds=plan.holds,
        waited=plan.waited,
    )
