"""Slurm's ``sched/backfill`` as the ``slurm`` preset runs it: every job it tests reserves.

EASY backfill (`Scheduler` with ``backfill=True``) keeps GPUs for the first job that cannot
start and lets any later job past it. slurmctld's backfill pass does more
(``src/plugins/sched/backfill/backfill.c``): it walks the pending jobs in priority order, up
to ``bf_max_job_test`` of them, gives each the earliest start that the running jobs' time
limits and the reservations of the jobs above it leave, starts it when that is now and
otherwise reserves its nodes from then for its time limit, so no job ever delays one above
it. Times sit on a ``bf_resolution``-second grid (rounded down, as slurmctld does) and no
job is reserved beyond ``bf_window`` seconds. The main scheduler's pass, which starts jobs
in priority order until the first that cannot start, decides the same starts.

On the lab, predicting Slurm alone with EASY backfill gave it shorter waits than Slurm
recorded on most demo seeds (docs/demo.md): lower jobs went past blocked ones that Slurm
kept waiting behind their reservations.

A reservation takes its nodes whole for its window, as slurmctld's backfill map does
(``_add_reservation`` clears the job's nodes from ``node_space``): a job that would still
run when a higher one's reservation begins may not use that reservation's nodes, even
their GPUs the reserved job leaves free (on the lab, counting only the reserved GPUs
backfilled 1-GPU jobs that Slurm kept waiting). Jobs that start now take their GPUs only,
as running jobs share nodes. Nodes are taken as topology/tree takes them (`tree_nodes`). A job that
starts now is placed by the placer among the GPUs no reservation needs while it runs.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field

import numpy as np

from .fit import Fit
from .placement import tree_nodes
from .plan import OrderView, Plan, Start
from .policy import JobChooser, Placer
from .state import ClusterState, PendingJob

__all__ = ["SlurmBackfill"]


@dataclass
class SlurmBackfill:
    """``chooser``'s priority order run through Slurm's backfill (see the module notes):
    ``max_job_test`` jobs at most (``bf_max_job_test``), reservations within ``window``
    seconds (``bf_window``), on a ``resolution``-second grid (``bf_resolution``)."""

    chooser: JobChooser
    placer: Placer
    max_job_test: int = 500
    window: float = 86_400.0
    resolution: float = 60.0
    name: str = field(default="")

    def __post_init__(self) -> None:
        if not self.name:
            self.name = f"{self.chooser.name}+{self.placer.name}+backfill"

    @property
    def needs_oracle(self) -> bool:
        return self.chooser.needs_oracle

    def decide(self, state: ClusterState) -> Plan:
        order = self.chooser.rank(state).order
        plan = _Timeline.of(state, self.resolution)
        fit = Fit.of(state)
        free = state.free.copy()
        horizon = state.now + self.window
        starts: list[Start] = []
        n_free = state.num_free
        for pos in range(min(len(order), self.max_job_test)):
            if n_free == 0:
                break  # nothing can start now; the reservations below would change no start
            job = state.pending[int(order[pos])]
            limit = math.inf if job.time_limit is None else job.time_limit
            found = plan.earliest(job, limit, horizon)
            if found is None:
                continue  # never fits, or not within the window: no reservation
            row, take = found
            if row > 0:
                plan.book(row, limit, take)
                continue
            usable = fit.usable(job, plan.unreserved(free, limit))
            gpus = self.placer.place(job, usable, state) if job.num_gpus <= int(np.count_nonzero(usable)) else None
            if gpus is None:
                continue  # CPUs, memory or a node constraint say no: a later pass tries again
            taken = fit.take(job, gpus)
            free[list(taken)] = False
            n_free = int(np.count_nonzero(free))
            plan.book(0, limit, plan.per_node(gpus))
            starts.append(Start(job.job_id, tuple(int(g) for g in gpus)))
        return Plan(order=OrderView(state.pending, order), starts=tuple(starts))


class _Timeline:
    """Free GPUs per node over time: row i holds each node's free GPUs from ``times[i]``
    until ``times[i + 1]`` (the last row: from then on). Row 0 starts now; running jobs
    give their GPUs back at their time limits, reservations take them for theirs."""

    def __init__(self, state: ClusterState, times: list[float], free: np.ndarray, resolution: float) -> None:
        self.state = state
        self.times = times
        self.free = free
        self.resolution = resolution

    @classmethod
    def of(cls, state: ClusterState, resolution: float) -> _Timeline:
        topo = state.topology
        now = state.now
        n_nodes = len(topo.nodes)
        back: dict[float, np.ndarray] = {}
        for run in state.running:
            if run.time_limit is None:
                continue  # no limit: as far as Slurm plans, its GPUs never come back
            # a job past its limit is about to be ended: back now
            at = max(now, math.floor(run.expected_end(now) / resolution) * resolution)
            row = back.setdefault(at, np.zeros(n_nodes, dtype=np.int64))
            row += np.bincount(topo.gpu_node[np.asarray(run.gpus, dtype=np.int64)], minlength=n_nodes)
        rows = [topo.per_node(state.free).astype(np.int64) + back.pop(now, 0)]
        times = [now]
        for t in sorted(back):
            times.append(t)
            rows.append(rows[-1] + back[t])
        return cls(state, times, np.array(rows), resolution)

    def per_node(self, gpus) -> np.ndarray:
        topo = self.state.topology
        return np.bincount(topo.gpu_node[np.asarray(gpus, dtype=np.int64)], minlength=len(topo.nodes))

    def _until(self, start: float, limit: float) -> float:
        """When a job started at ``start`` is expected to end: its limit on the grid."""
        end = math.floor((start + limit) / self.resolution) * self.resolution
        return end if end > start else start + limit

    def _rows(self, row: int, limit: float) -> int:
        """One past the last row that the job's run from ``times[row]`` overlaps."""
        return bisect.bisect_left(self.times, self._until(self.times[row], limit), lo=row + 1)

    def earliest(self, job: PendingJob, limit: float, horizon: float) -> tuple[int, np.ndarray] | None:
        """The first row from which ``job`` fits on the nodes' free GPUs for ``limit``
        seconds, and its GPUs per node there (`tree_nodes`); ``None`` if no row up to
        ``horizon`` does."""
        for row in np.flatnonzero(_fits(job, self.free)).tolist():
            if self.times[row] > horizon:
                return None
            end = self._rows(row, limit)
            nodes = tree_nodes(job, self.free[row] if end == row + 1 else self.free[row:end].min(axis=0),
                               self.state.topology.node_switch)
            if nodes is not None:
                take = np.zeros(self.free.shape[1], dtype=np.int64)
                for node, k in nodes:
                    take[node] = k
                return row, take
        return None

    def book(self, row: int, limit: float, take: np.ndarray) -> None:
        """Take ``take`` GPUs per node from ``times[row]`` for ``limit`` seconds; a
        reservation (a later row) takes its nodes whole, as slurmctld's node_space does."""
        end = self._until(self.times[row], limit)
        at = bisect.bisect_left(self.times, end)
        if math.isfinite(end) and (at == len(self.times) or self.times[at] != end):
            self.times.insert(at, end)
            self.free = np.insert(self.free, at, self.free[at - 1], axis=0)
        if row == 0:
            self.free[row:at] -= take
        else:
            nodes = np.flatnonzero(take)
            self.free[row:at, nodes] = np.minimum(self.free[row:at, nodes] - take[nodes], 0)

    def unreserved(self, free: np.ndarray, limit: float) -> np.ndarray:
        """``free`` less the GPUs the reservations need during the next ``limit`` seconds:
        per node, only as many free GPUs as stay free all that time (the lowest indices)."""
        keep = self.free[0 : self._rows(0, limit)].min(axis=0)
        topo = self.state.topology
        counts = topo.per_node(free)
        short = np.flatnonzero(keep < counts)
        if not len(short):
            return free
        out = free.copy()
        for node in short.tolist():
            lo, hi = int(topo.node_first_gpu[node]), int(topo.node_first_gpu[node + 1])
            out[np.flatnonzero(free[lo:hi])[max(int(keep[node]), 0) :] + lo] = False
        return out


def _fits(job: PendingJob, free: np.ndarray) -> np.ndarray:
    """Per row of free GPU counts per node, whether ``job`` fits there at all."""
    if job.num_nodes is not None:
        return (free >= job.num_gpus // job.num_nodes).sum(axis=1) >= job.num_nodes
    return free.clip(min=0).sum(axis=1) >= job.num_gpus
