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
starts now is placed by the placer among the GPUs no reservation needs while it runs. Under
a block topology a reservation's nodes keep to one block as a start's do (`Fit.block_room`):
slurmctld's will-run test evaluates blocks as its start test does.

A reservation starts when slurmctld's will-run test says, which takes the running jobs'
ends in batches (`will_run_batches`), so it often starts later than the first moment the
job would fit, and leaves room for more jobs before it. The batches are taken over all
running jobs, where slurmctld takes only those on nodes the job may use.
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
    seconds (``bf_window``), on a ``resolution``-second grid (``bf_resolution``), their
    starts where the will-run test puts them, its windows ``clock_phase`` seconds off the
    replay's clock (`will_run_batches`)."""

    chooser: JobChooser
    placer: Placer
    max_job_test: int = 500
    window: float = 86_400.0
    resolution: float = 60.0
    clock_phase: float = 0.0
    name: str = field(default="")

    def __post_init__(self) -> None:
        if not self.name:
            self.name = f"{self.chooser.name}+{self.placer.name}+backfill"

    @property
    def needs_oracle(self) -> bool:
        return self.chooser.needs_oracle

    def decide(self, state: ClusterState) -> Plan:
        order = self.chooser.rank(state).order
        fit = Fit.of(state)
        plan = _Timeline(state, self.resolution, self.clock_phase, fit)
        free = state.free.copy()
        horizon = state.now + self.window
        starts: list[Start] = []
        n_free = state.num_free
        for pos in range(min(len(order), self.max_job_test)):
            if n_free == 0:
                break  # nothing can start now; the reservations below would change no start
            job = state.pending[int(order[pos])]
            limit = NO_LIMIT if job.time_limit is None else job.time_limit
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


#: How long slurmctld's backfill takes a job without a time limit to run (``YEAR_MINUTES``
#: in backfill.c, used where the job's and its partition's limits are ``INFINITE``).
NO_LIMIT = 365 * 86_400.0

#: The first window, in seconds, in which slurmctld's will-run test takes running jobs' ends
#: together (``time_window`` in ``_will_run_test``, src/plugins/select/cons_common/job_test.c).
WILL_RUN_WINDOW = 30.0


def will_run_batches(ends: list[float], clock_phase: float = 0.0) -> list[float]:
    """For each of ``ends`` (ascending), when slurmctld's will-run test gives its GPUs back:
    the last end of its batch.

    To find when a pending job can start, the select plugin takes the running jobs off the
    cluster in order of end, a batch at a time, and reports the last end of the first batch
    after which the job fits. The first batch runs to 30 s past the first end's next
    multiple of 30 s (on slurmctld's clock, which reads ``clock_phase`` at the replay's 0);
    the window then doubles, and doubles again until it reaches the next end, for each
    further batch. So a pending job fitting after one end is promised the batch's last:
    on the lab a 2-GPU job (seed 19) was reserved for when a 2-minute job would end, not
    for the 1-minute job ending beside it, and a 1-GPU job ran before that reservation."""
    out = list(ends)
    if not ends:
        return out
    barrier = ends[0] + WILL_RUN_WINDOW - (ends[0] + clock_phase) % WILL_RUN_WINDOW
    window = WILL_RUN_WINDOW
    i, n = 0, len(ends)
    while i < n:
        j = i
        while j + 1 < n and ends[j + 1] <= barrier + window:
            j += 1
        out[i : j + 1] = [ends[j]] * (j + 1 - i)
        i = j + 1
        window *= 2
        while i < n and ends[i] > barrier + window:
            window *= 2
    return out


class _Timeline:
    """Free GPUs per node over time: row i holds each node's free GPUs from ``times[i]``
    until ``times[i + 1]`` (the last row: from then on). Row 0 starts now; running jobs,
    and those started in this pass, give their GPUs back at their time limits as the
    will-run test batches them (`will_run_batches`); reservations take whole nodes for
    theirs. A start changes the batches, so the rows are rebuilt from both lists then."""

    def __init__(self, state: ClusterState, resolution: float, clock_phase: float, fit: Fit) -> None:
        self.state = state
        self.fit = fit
        self.resolution = resolution
        self.clock_phase = clock_phase
        topo = state.topology
        self.now_free = topo.per_node(state.free).astype(np.int64)
        # the running jobs' GPUs per node in one pass (a replay builds this timeline at every
        # event), kept for those with a limit: without one, as far as Slurm plans, their GPUs
        # never come back (their deadline is -inf)
        runs = state.running_arrays
        nodes = len(topo.nodes)
        owner = np.repeat(np.arange(len(runs.num_gpus), dtype=np.int64), runs.num_gpus)
        counts = np.bincount(owner * nodes + topo.gpu_node[runs.gpus],
                             minlength=len(runs.num_gpus) * nodes).reshape(len(runs.num_gpus), nodes)
        limited = runs.deadline > -math.inf
        ends = np.maximum(state.now, runs.deadline[limited])  # `RunningJob.expected_end`
        counts = counts[limited]
        by_end = np.argsort(ends, kind="stable")
        #: each running job's end by its time limit, ascending, and its GPUs per node
        self.end_at: np.ndarray = ends[by_end]
        self.end_gpus: np.ndarray = counts[by_end]
        #: (start, end, GPUs per node) of the reservations made in this pass
        self.reserved: list[tuple[float, float, np.ndarray]] = []
        self._totals: np.ndarray | None = None
        self._rebuild()

    def _rebuild(self) -> None:
        """The rows from scratch: the GPUs free now, given back at each batch's last end
        (on the grid; an overrun job's now), less the reservations' nodes."""
        now = self.state.now
        back_at = np.array(will_run_batches(self.end_at.tolist(), self.clock_phase), dtype=float)
        back_at = np.maximum(now, np.floor(back_at / self.resolution) * self.resolution)  # an overrun job: back now
        # ascending (the batches' ends are), so each time's jobs are adjacent
        at, first = np.unique(back_at, return_index=True)
        marks = {t for r in self.reserved for t in r[:2]}
        times = sorted(set(at.tolist()) | marks | {now})
        given = np.zeros((len(times), len(self.now_free)), dtype=np.int64)
        if len(at):
            given[np.searchsorted(times, at)] = np.add.reduceat(self.end_gpus, first, axis=0)
        rows = self.now_free + np.cumsum(given, axis=0)
        for start, end, take in self.reserved:
            lo = bisect.bisect_left(times, start)
            hi = bisect.bisect_left(times, end)
            nodes = np.flatnonzero(take)
            rows[lo:hi, nodes] = np.minimum(rows[lo:hi, nodes] - take[nodes], 0)
        self.times: list[float] = times
        self.free: np.ndarray = rows
        self._totals = None

    def totals(self) -> np.ndarray:
        """Per row, the free GPUs of all nodes (a reserved node's count as none)."""
        if self._totals is None:
            self._totals = self.free.clip(min=0).sum(axis=1)
        return self._totals

    def _fits(self, job: PendingJob) -> np.ndarray:
        """Per row, whether ``job`` fits there at all."""
        if job.num_nodes is not None:
            return (self.free >= job.num_gpus // job.num_nodes).sum(axis=1) >= job.num_nodes
        return self.totals() >= job.num_gpus

    def per_node(self, gpus) -> np.ndarray:
        topo = self.state.topology
        return np.bincount(topo.gpu_node[np.asarray(gpus, dtype=np.int64)], minlength=len(topo.nodes))

    def _until(self, start: float, limit: float) -> float:
        """When a job started at ``start`` is expected to end: its limit on the grid."""
        end = math.floor((start + limit) / self.resolution) * self.resolution
        return end if end > start else start + limit

    def _rows(self, row: int, limit: float) -> int:
        """One past the last row that the job's run from ``times[row]`` overlaps, a row
        that begins just as the run ends included: slurmctld tests a job against every
        ``node_space`` slot with ``begin_time <= end_time``, so a job whose limit ends just
        as a reservation begins may not use the reservation's nodes (on the lab a 1-GPU job
        with a minute's limit waited beside the 1-GPU job started in the same pass, whose
        end began the reservation of the 8-GPU job above it)."""
        return bisect.bisect_right(self.times, self._until(self.times[row], limit), lo=row + 1)

    def earliest(self, job: PendingJob, limit: float, horizon: float) -> tuple[int, np.ndarray] | None:
        """The first row from which ``job`` fits on the nodes' free GPUs for ``limit``
        seconds, and its GPUs per node there (`tree_nodes`); ``None`` if no row up to
        ``horizon`` does."""
        for row in np.flatnonzero(self._fits(job)).tolist():
            if self.times[row] > horizon:
                return None
            end = self._rows(row, limit)
            room = self.free[row] if end == row + 1 else self.free[row:end].min(axis=0)
            if self.state.topology.blocks is not None:
                room = self.fit.block_room(job, room.clip(min=0))
            nodes = tree_nodes(job, room, self.state.topology.node_switch)
            if nodes is not None:
                take = np.zeros(self.free.shape[1], dtype=np.int64)
                for node, k in nodes:
                    take[node] = k
                return row, take
        return None

    def book(self, row: int, limit: float, take: np.ndarray) -> None:
        """Take ``take`` GPUs per node from ``times[row]`` for ``limit`` seconds: row 0 is a
        start, running until its limit (slurmctld's will-run test counts it from then on);
        a later row a reservation, which takes its nodes whole, as slurmctld's node_space
        does."""
        if row == 0:
            self.now_free = self.now_free - take
            at = int(np.searchsorted(self.end_at, self.state.now + limit, side="right"))  # after equal ends
            self.end_at = np.insert(self.end_at, at, self.state.now + limit)
            self.end_gpus = np.insert(self.end_gpus, at, take, axis=0)
            self._rebuild()
            return
        start = self.times[row]
        end = self._until(start, limit)
        self.reserved.append((start, end, take))
        at = bisect.bisect_left(self.times, end)
        if at == len(self.times) or self.times[at] != end:
            self.times.insert(at, end)
            self.free = np.insert(self.free, at, self.free[at - 1], axis=0)
        nodes = np.flatnonzero(take)
        self.free[row:at, nodes] = np.minimum(self.free[row:at, nodes] - take[nodes], 0)
        self._totals = None

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
