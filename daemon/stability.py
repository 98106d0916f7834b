"""Stable plans: a pin or hold moves only for a reason that beats a margin.

A policy re-decides from scratch every cycle, and between two cycles little changes: a few
seconds of waiting, a job's expected end. Ties between equally good GPU sets then break
differently and the plan flip-flops: a job pinned to node2, then node3, then node2 again, a
hold reservation deleted and created again every few seconds. Each move costs Slurm
commands, and a pin that moves just before Slurm starts the job sends it somewhere the plan
no longer meant. So the daemon keeps last cycle's placement when it is still as good:

- a **start** keeps last cycle's GPUs for the job (started or held there) when they are all
  free now, not taken by another start of this plan (an exclusive one takes its nodes) nor
  held by one of its holds, and the job may use them beside the plan's other starts (CPUs,
  memory, type, features: ``agents.fit``);
- a **hold** keeps last cycle's GPUs when they are not needed by this plan's starts or other
  holds (as kept, or as planned where not kept: two holds that swapped keep their GPUs),
  are expected back no more than ``margin`` seconds after the new choice, and the job may
  start on them then beside the plan's starts (CPUs, memory, ``--exclusive``, type,
  features, node list, exclusions).

The plan's order and its choice of *which* jobs start are never changed, only where.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import numpy as np

from attentived.agents.fit import Fit, kept_for
from attentived.agents.plan import Hold, Plan, Start
from attentived.agents.policy import released_by
from attentived.agents.state import ClusterState, PendingJob


def previous_placements(plan: Plan) -> dict[str, tuple[int, ...]]:
    """Job -> GPUs, from a plan's starts and holds: what the next cycle compares with."""
    out = {h.job_id: tuple(h.gpus) for h in plan.holds}
    out.update({s.job_id: tuple(s.gpus) for s in plan.starts})
    return out


def stabilize(plan: Plan, state: ClusterState, previous: Mapping[str, tuple[int, ...]], margin: float) -> Plan:
    """``plan`` with each start and hold moved back to last cycle's GPUs where those are
    still as good (see the module docstring)."""
    if not previous:
        return plan
    jobs = {j.job_id: j for j in state.pending}
    starts = list(plan.starts)
    fit = Fit.of(state)  # every start booked where it starts: a move back must fit beside the others
    booked = [fit.started(jobs[s.job_id], s.gpus, state.now) for s in starts]
    free = state.free.copy()
    for run in booked:
        free[list(run.gpus)] = False
    taken = {g for run in booked for g in run.gpus}  # an exclusive start takes its nodes whole
    held = {g for h in plan.holds for g in h.gpus}  # a start never moves onto a hold's GPUs
    for i, s in enumerate(starts):
        old = previous.get(s.job_id)
        job = jobs[s.job_id]
        if old is None or tuple(sorted(old)) == tuple(sorted(s.gpus)) or len(old) != len(s.gpus):
            continue
        mine = booked[i].gpus
        if any(g in held or (g in taken and g not in mine) for g in old):
            continue
        trial_fit = fit.copy()
        trial_fit.release(booked[i])
        trial = free.copy()
        trial[list(mine)] = True
        if not bool(trial_fit.usable(job, trial)[list(old)].all()) or not _shaped_like(state, job.num_nodes, old):
            continue
        taken.difference_update(mine)
        free[list(mine)] = True
        fit, booked[i] = trial_fit, trial_fit.started(job, old, state.now)
        taken.update(booked[i].gpus)
        free[list(booked[i].gpus)] = False
        starts[i] = Start(s.job_id, tuple(old))
    kept: dict[int, Hold] = {}  # hold index -> the hold back on last cycle's GPUs
    for k, h in enumerate(plan.holds):
        old = previous.get(h.job_id)
        if (old is not None and len(old) == len(h.gpus) and tuple(sorted(old)) != tuple(sorted(h.gpus))
                and not (set(old) & taken) and h.job_id in jobs
                and _shaped_like(state, jobs[h.job_id].num_nodes, old)):
            back = _expected_back(state, old)
            if (back is not None and back <= h.expected_start + margin
                    and _starts_there(state, fit, free, jobs[h.job_id], old, back)):
                kept[k] = Hold(h.job_id, tuple(old), max(back, state.now))
    holds = _disjoint(plan.holds, kept, jobs, state)
    return replace(plan, starts=tuple(starts), holds=tuple(holds))


def _disjoint(planned: tuple[Hold, ...], kept: dict[int, Hold], jobs: Mapping[str, PendingJob],
              state: ClusterState) -> tuple[Hold, ...]:
    """The holds, ``kept`` ones on last cycle's GPUs, none sharing a GPU (an exclusive
    job's hold keeps its nodes whole: `kept_for`). Last cycle's holds were disjoint and so
    are this plan's, so a clash is always a kept hold on GPUs another hold is planned on:
    that one moves as planned (which may free, or clash with, others)."""
    def keeps(h: Hold) -> set[int]:
        job = jobs.get(h.job_id)
        return set(h.gpus if job is None else kept_for(job, h.gpus, state.topology))

    while True:
        final = [kept.get(k, h) for k, h in enumerate(planned)]
        clash = next((k for k in kept if any(keeps(kept[k]) & keeps(other)
                                             for j, other in enumerate(final) if j != k)), None)
        if clash is None:
            return tuple(final)
        del kept[clash]


def _shaped_like(state: ClusterState, num_nodes: int | None, gpus: tuple[int, ...]) -> bool:
    """A fixed-shape job (``num_nodes``) keeps only a GPU set spread the same way."""
    if num_nodes is None:
        return True
    counts = np.bincount(state.topology.gpu_node[list(gpus)])
    counts = counts[counts > 0]
    return len(counts) == num_nodes and len(set(counts.tolist())) == 1


def _starts_there(state: ClusterState, fit: Fit, free: np.ndarray, job: PendingJob, gpus: tuple[int, ...],
                  back: float) -> bool:
    """Slurm would start ``job`` on ``gpus`` at ``back``, when they are all expected free:
    the running jobs on their nodes that end by then released, beside this plan's starts
    (``fit``, ``free``), by every check `Fit.usable` makes (CPUs, memory, ``--exclusive``,
    type, features, node list, exclusions). A hold kept where the job cannot start keeps
    it from every other node for nothing."""
    then, freed = released_by(fit, state, gpus, back)
    room = free.copy()
    room[freed] = True
    return bool(then.usable(job, room)[list(gpus)].all())


def _expected_back(state: ClusterState, gpus: tuple[int, ...]) -> float | None:
    """When all of ``gpus`` are expected free (running jobs' time limits); ``None`` when one
    is neither free nor held by a running job (a node went down)."""
    want = set(gpus)
    back = state.now
    busy = {g for g in want if not state.free[g]}
    for run in state.running:
        hit = busy.intersection(run.gpus)
        if hit:
            back = max(back, run.expected_end(state.now))
            busy -= hit
    return None if busy else back
