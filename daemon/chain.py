"""Keep Slurm from running ahead of the plan between two cycles.

The plan holds the first job that cannot start; the daemon pins it to its held nodes, so
under ``sched/builtin`` it blocks its partition until they free up, and then Slurm starts it
there at once. But in that same scheduling pass Slurm walks on down the priority list and
starts whatever fits next, wherever its own selection puts it: jobs the plan never placed
(measured on the lab: the two jobs after each hold started this way).

So the daemon extends the plan's hold into a short chain (``hold_depth`` jobs): the next
waiting jobs in plan order, each held where it is expected to start in strict plan order
(running jobs, then earlier holds, release their GPUs at their time limits). Each is
pinned like the first hold: it either starts on its planned nodes or, failing for busy
nodes, blocks everything below it. Jobs further down start only after the next cycle
has planned them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from attentived.agents.fit import Fit
from attentived.agents.placement import Consolidate
from attentived.agents.plan import Hold, Plan
from attentived.agents.policy import Placer
from attentived.agents.state import ClusterState, PendingJob, RunningJob


def chain_holds(plan: Plan, state: ClusterState, depth: int) -> Plan:
    """``plan`` with holds for up to ``depth`` waiting jobs after its first hold."""
    if not plan.holds or depth <= 0:
        return plan
    fit = Fit.of(state)
    free = state.free.copy()
    claimed = np.zeros_like(free)
    by_id = {j.job_id: j for j in state.pending}
    for s in plan.starts:
        job = by_id.get(s.job_id)
        if job is not None:
            for g in fit.take(job, s.gpus):
                free[g] = False
        claimed[list(s.gpus)] = True
    placed = {s.job_id for s in plan.starts} | {h.job_id for h in plan.holds}
    for h in plan.holds:
        claimed[list(h.gpus)] = True
    ends = state.running_by_end
    holds = list(plan.holds)
    placer = Consolidate()
    after = max(h.expected_start for h in plan.holds)
    for job_id in plan.order:
        if len(holds) - len(plan.holds) >= depth:
            break
        job = by_id.get(job_id)
        if job is None or job_id in placed:
            continue
        hold = _expected(job, free, claimed, fit, ends, state, placer, after)
        if hold is None:
            break  # strict order: nothing below can be placed before it
        holds.append(hold)
        claimed[list(hold.gpus)] = True
        after = hold.expected_start
    return replace(plan, holds=tuple(holds)) if len(holds) > len(plan.holds) else plan


def _expected(job: PendingJob, free: np.ndarray, claimed: np.ndarray, fit: Fit, ends: Sequence[RunningJob],
              state: ClusterState, placer: Placer, after: float) -> Hold | None:
    """Where and when ``job`` fits as running jobs end (never on ``claimed`` GPUs, never
    before ``after``: strict order)."""
    fit = fit.copy()
    future = free & ~claimed
    for run in (None, *ends):
        if run is not None:
            future[list(fit.release(run))] = True
            future &= ~claimed
        if int(future.sum()) < job.num_gpus:
            continue
        usable = fit.usable(job, future)
        if int(usable.sum()) < job.num_gpus:
            continue
        gpus = placer.place(job, usable, state)
        if gpus is not None:
            when = state.now if run is None else run.expected_end(state.now)
            return Hold(job.job_id, tuple(int(g) for g in gpus), max(after, when))
    return None
