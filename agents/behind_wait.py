"""What starts behind a learned policy's WAIT, in the decision loop and in training alike.

A WAIT idles the free GPUs until the next arrival or end. The jobs that cannot delay the
job the plan holds GPUs for, and lose nothing by starting now, start anyway: those whose
time limit ends before the held job is expected to start (Slurm ends them by then), and
those that get a placement as packed as on an empty cluster without touching the held
GPUs (they take nothing the held job needs). The rules of EASY backfill, with one
condition more: what the WAIT may have been for, a packed placement later instead of a
spread one now, is kept.

Why: a model trained with an urgency input learned to WAIT with every job able to start:
on one held-out window at W = 1 it left 96 of 128 GPUs idle for 95 hours with 177 jobs
pending, all of 1 or 4 GPUs. A WAIT held for a job that can only start when long jobs end
idled the cluster the same way. `attentived.agents.two_phase` applies it to every plan
that ends in a WAIT, and the training environment (`attentived.training.gym_env`) to
every WAIT, so the agents learn what a WAIT does when they run.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .fit import Fit, kept_for
from .placement import Consolidate, packed
from .plan import Hold, Plan, Start
from .policy import at_hold, expected_hold, fits_both
from .state import ClusterState, PendingJob, request

PLACER = Consolidate()
"""Where a held job is expected to start and where a job behind a WAIT starts."""


def held(state: ClusterState, index: int) -> Hold | None:
    """Where and when pending job ``index`` is expected to fit (a consolidated placement)."""
    return expected_hold(state.pending[index], state.free, state, PLACER)


def wait_hold(state: ClusterState, blocked: Sequence[int] | np.ndarray, plan: Plan | None = None) -> Hold | None:
    """The hold a WAIT keeps on ``state``: the look-ahead's when the policy reads its plan
    (``plan``, `NetConfig.plan_input`) and that plan holds GPUs, else `held` of the first
    of ``blocked`` (queue indices of jobs that cannot start, in the policy's order).

    Why: a model that follows its teacher should keep its teacher's hold, not one of its
    own. The look-ahead seldom holds (it starts what its model says to start now and
    leaves the rest pending), but when it does (every job of its window started, one
    behind the window blocked), that is the job its WAIT label is about."""
    if plan is not None and plan.holds:
        return plan.holds[0]
    return held(state, blocked[0]) if len(blocked) else None


def fill_behind_wait(state: ClusterState, ranked: Sequence[PendingJob], hold: Hold | None,
                     plan: Plan | None = None) -> list[Start]:
    """The jobs, in ``ranked`` order, that start behind a WAIT on ``state`` (see the module
    docstring), consolidated on the free GPUs; ``hold`` is the plan's hold, if any.

    ``plan``: the look-ahead's plan a model reads (`NetConfig.plan_input`). Where it starts
    nothing, the WAIT starts nothing either: that is its teacher's WAIT, GPUs kept idle on
    purpose (for a large job of a user it protects, say), and filling behind it was, on a
    held-out window at W = 1, the only way a model that took its teacher's every other
    decision left the worst-off user waiting 27% longer (14.3 h against 11.2 h)."""
    if plan is not None and not plan.starts:
        return []
    fit = Fit.of(state)
    free = state.free.copy()
    n_free = int(free.sum())
    kept = np.zeros_like(free)
    behind = fit  # the hold's nodes when it starts (`at_hold`): a job that outlives it must fit there too
    if hold is not None:
        held_job = next(j for j in state.pending if j.job_id == hold.job_id)
        kept[list(kept_for(held_job, hold.gpus, state.topology))] = True
        behind = at_hold(fit, held_job, hold, state)
    starts: list[Start] = []
    # Requests that found no room since the last start: a job asking alike (`request`) finds
    # none either. Behind a WAIT the whole queue is walked, and under Slurm's block topology
    # every job asks `Fit.usable` for its block: 10,000 jobs took a second at 16,384 GPUs.
    refused: set[tuple[tuple, bool]] = set()
    for job in ranked:
        if not n_free:
            break
        if (hold is not None and job.job_id == hold.job_id) or job.num_gpus > n_free:
            continue
        in_time = hold is not None and job.time_limit is not None and state.now + job.time_limit <= hold.expected_start
        asked = (request(job), in_time)
        if asked in refused:
            continue
        usable = fit.usable(job, free) if in_time else fits_both(job, free & ~kept, fit, behind)
        gpus = PLACER.place(job, usable, state) if job.num_gpus <= int(usable.sum()) else None
        if gpus is None or not (in_time or packed(state.topology, gpus, job.num_nodes)):
            refused.add(asked)
            continue
        refused.clear()
        taken = fit.take(job, gpus)
        if not in_time and behind is not fit:
            behind.take(job, gpus)
        free[list(taken)] = False
        n_free -= len(taken)
        starts.append(Start(job.job_id, tuple(int(g) for g in gpus)))
    return starts

