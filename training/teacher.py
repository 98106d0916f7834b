"""The teacher of the teacher-guided start of PPO (see `attentived.training.ppo`).

A strong policy whose actions the agents are pulled toward (a behaviour-cloning term whose
weight is annealed to a floor): a heuristic, or the look-ahead at each episode's fairness
setting W, which then labels the states the agent itself visits (expert iteration). Each trainable agent kind
(`attentived.agents.kinds`) turns the teacher's plan into an action of its own
environment; this module holds the plan and the two-phase environment's reading of it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar
from weakref import WeakKeyDictionary

from attentived.agents.carried_plan import plan_at
from attentived.agents.guided import look_ahead_teacher
from attentived.agents.order import estimated_runtime
from attentived.agents.pack import Pack
from attentived.agents.placement import Consolidate
from attentived.agents.plan import Plan
from attentived.agents.policy import Policy, Ranking, Scheduler
from attentived.agents.state import ClusterState
from attentived.training.gym_env import SchedulingEnv


@dataclass
class SmallestGpuTimeFirst:
    """Job order of the teacher: smallest estimated GPU-time first (GPUs x time limit x the
    user's limit accuracy), FIFO on ties."""

    name: str = "smallest-gpu-time"
    needs_oracle: ClassVar[bool] = False

    def rank(self, state: ClusterState) -> Ranking:
        key = [(j.num_gpus * estimated_runtime(j, state), j.submit_time, j.job_id) for j in state.pending]
        return Ranking(tuple(sorted(range(len(key)), key=key.__getitem__)))


TEACHER = Scheduler(SmallestGpuTimeFirst(), Consolidate(), backfill=True, name="teacher")
"""Smallest-GPU-time-first with consolidated placement and EASY backfill: the strongest
heuristic on the validation windows (ahead of every preset), and one that uses holds, so
the agents also see when waiting pays."""


TEACHERS: dict[str, Callable[[float], Policy]] = {
    "smallest-gpu-time": lambda _fairness: TEACHER,
    "look-ahead": look_ahead_teacher,
    "look-ahead-packed": lambda fairness: Pack(look_ahead_teacher(fairness), "look-ahead-packed"),
}
"""The teachers by name (`PPOConfig.teacher`), each a function of the episode's fairness
setting W. ``look-ahead`` is expert iteration: the `Portfolio` look-ahead at W labels the
states the agent itself visits (its plan is the one the agent is pulled toward), so one
network learns each W's schedule; ``look-ahead-packed`` is the same look-ahead's order
started by the packing rule (`attentived.agents.pack`), which on held-out windows was
faster at every W (5.10 h against 5.54 h at W = 0.75, docs/results.md); ``smallest-gpu-time``
ignores W."""


def teacher_action(env: SchedulingEnv, teacher: str = "smallest-gpu-time") -> int:
    """`TEACHER`'s action in ``env``: the first job its plan starts (WAIT when the plan
    starts nothing, which is when it holds GPUs for a blocked job), then that job's GPUs
    among the candidates (the teacher places with Consolidate, one of the generators; a
    backfilled job that must avoid held GPUs may land elsewhere, and then the consolidate
    candidate stands in). A first start outside the agent's window, which the window's
    construction makes rare, falls back to the feasible window job the teacher ranks first.
    In an environment under the packing rule (``pack=True``), a plan that only holds a job
    able to start now (spread) labels that job: choosing it there is holding it."""
    view, state = env.job_view, env.state
    plan = _plan(env, state, teacher)
    if env.phase == 1:  # the teacher's GPUs when it chose this job too, else consolidate's
        sets = [c.gpus for c in env.placements]
        chosen = state.pending[int(view.index[env.chosen_slot])].job_id
        if plan.starts and plan.starts[0].job_id == chosen and tuple(sorted(plan.starts[0].gpus)) in sets:
            return sets.index(tuple(sorted(plan.starts[0].gpus)))
        return consolidate_candidate(env)
    slot_of = {state.pending[int(i)].job_id: s for s, i in enumerate(view.index) if i >= 0 and view.feasible[s]}
    if plan.starts and plan.starts[0].job_id in slot_of:
        return slot_of[plan.starts[0].job_id]
    if not plan.starts and env.packer is not None and plan.holds and plan.holds[0].job_id in slot_of:
        return slot_of[plan.holds[0].job_id]  # under the packing rule, choosing a job that cannot pack holds it
    if not plan.starts and view.action_mask[env.wait_action]:
        return env.wait_action
    return next((slot_of[j] for j in plan.order if j in slot_of), env.wait_action)


_PLANS: WeakKeyDictionary[SchedulingEnv, tuple[ClusterState, Plan]] = WeakKeyDictionary()
_SCHEDULERS: WeakKeyDictionary[SchedulingEnv, tuple[str, float, Policy]] = WeakKeyDictionary()


def _plan(env: SchedulingEnv, state: ClusterState, teacher: str) -> Plan:
    """The teacher's plan for ``state``, computed once per state of each environment: the
    GPU phase shows the state of the job phase before it, and the plan is a pure function
    of the (immutable) snapshot, so the second phase reuses it; after a start of the plan
    the rest of it is carried (`carried_plan`), as the teacher itself starts its whole plan
    at once. The teacher is built once per episode (its W), keeping the look-ahead's
    caches. An environment whose observations show the same look-ahead's plan
    (``plan=True``) has it already."""
    if teacher == "look-ahead" and (shown := env.encoder.plan_of(state)) is not None:
        return shown
    built = _SCHEDULERS.get(env)
    if built is None or built[:2] != (teacher, env.fairness):
        built = _SCHEDULERS[env] = (teacher, env.fairness, TEACHERS[teacher](env.fairness))
        _PLANS.pop(env, None)  # a plan of another teacher or W is not carried
    plan = plan_at(state, _PLANS.get(env), built[2].decide)
    _PLANS[env] = (state, plan)
    return plan


def consolidate_candidate(env: SchedulingEnv) -> int:
    """The GPU-phase action that takes `Consolidate`'s placement (always a candidate)."""
    return next(k for k, c in enumerate(env.placements) if "consolidate" in c.sources)


def job_teacher_action(env: SchedulingEnv, teacher: str = "smallest-gpu-time") -> int:
    """`teacher_action` for an agent that only chooses jobs (DeepRM-style): the teacher's job,
    and always the consolidated placement, the one such an agent can take."""
    return consolidate_candidate(env) if env.phase == 1 else teacher_action(env, teacher)
