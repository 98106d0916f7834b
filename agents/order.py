"""Heuristic job choosers: FIFO, SJF, fair-share, Tiresias-style LAS, Slurm multifactor.

Each ranks the pending queue from what Slurm shows live. SJF and LAS need a size estimate
and have only the user's time limit, sharpened by how much that user over-asked on
finished jobs; ``sjf-oracle`` sees true durations and exists only as an upper bound.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import ClassVar, overload

import numpy as np

from .policy import Ranking
from .state import ClusterState, PendingJob


def estimated_runtime(job: PendingJob, state: ClusterState) -> float:
    """Expected run time from the time limit and the user's history of over-asking;
    ``inf`` when the job has no limit (it may run forever)."""
    if job.time_limit is None:
        return math.inf
    accuracy = state.user(job.user).limit_accuracy
    return job.time_limit * (accuracy or 1.0)  # 0.0 (jobs that ran 0 s) is no history, as `estimated_runtimes` reads it


def estimated_runtimes(state: ClusterState) -> np.ndarray:
    """``estimated_runtime`` for the whole queue at once (row i = ``state.pending[i]``)."""
    q = state.queue
    return q.limit * state.limit_accuracies[q.user] if len(q.users) else q.limit.copy()


def _rank_by(state: ClusterState, *keys: np.ndarray) -> Ranking:
    """Sort by ``keys`` (most significant first), arrival order breaking ties."""
    q = state.queue
    if not keys:
        return Ranking(q.arrival)
    # A queue in arrival order breaks ties by position: no gather of ``seq`` (the simulator's).
    return Ranking(SortedOnRead(None if q.in_arrival_order else q.seq, keys))


class SortedOnRead(Sequence[int]):
    """Queue indices by ``keys`` (most significant first), ``seq`` (arrival order; ``None``:
    the indices' own) breaking ties, sorted only as far as they are read: the first ``k``
    are the queue's smallest ``k`` by the first key (a partition), sorted; reading further
    doubles ``k``.

    A plan without backfill reads a handful (it stops at the first job that does not
    fit); sorting a queue of thousands at each of the 700,000 decisions of a month on
    16,384 GPUs was a fifth of that replay. ``np.asarray`` gives the whole order (the
    daemon's priorities, a hold with backfill)."""

    __slots__ = ("_seq", "_keys", "_head")

    def __init__(self, seq: np.ndarray | None, keys: tuple[np.ndarray, ...]) -> None:
        self._seq = seq
        self._keys = keys
        self._head = np.zeros(0, dtype=np.int64)

    def __len__(self) -> int:
        return len(self._keys[0])

    @overload
    def __getitem__(self, i: int) -> int: ...
    @overload
    def __getitem__(self, i: slice) -> tuple[int, ...]: ...
    def __getitem__(self, i: int | slice) -> int | tuple[int, ...]:
        if isinstance(i, slice):
            return tuple(np.asarray(self)[i].tolist())
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        if i >= len(self._head):
            self._sort(1 if i == 0 else max(i + 1, 2 * len(self._head), 16))
        return int(self._head[i])

    def __iter__(self) -> Iterator[int]:
        return iter(np.asarray(self).tolist())

    def __array__(self, dtype: np.dtype | None = None, copy: bool | None = None) -> np.ndarray:
        if len(self._head) < len(self):
            self._sort(len(self))
            self._head.setflags(write=False)  # shared by every reader of the ranking
        out = self._head if dtype is None else self._head.astype(dtype, copy=False)
        return out.copy() if copy and out is self._head else out

    def _sort(self, k: int) -> None:
        """Make ``_head`` the first ``k`` (at least) of the order."""
        seq, keys = self._seq, self._keys
        first = keys[0]
        if k == 1 and len(keys) == 1 and seq is None:
            # The head alone (a plan that holds it reads no further): the first minimum.
            top = int(first.argmin())
            if not np.isnan(first[top]):  # argmin takes NaN for the smallest
                self._head = np.array([top])
                return
        if 4 * k < len(first):
            kth = np.partition(first, k - 1)[k - 1]
            if not np.isnan(kth):  # NaN sorts last: beyond it, sort everything
                rows = np.flatnonzero(first <= kth)  # every row of the first k, ties included
                by = np.lexsort((rows if seq is None else seq[rows], *(key[rows] for key in reversed(keys))))
                self._head = rows[by[:k]]
                return
        # lexsort is stable: without ``seq`` equal keys stay in index order
        self._head = np.lexsort(tuple(reversed(keys)) if seq is None else (seq, *reversed(keys)))


@dataclass
class Fifo:
    """First come, first served: submit time, then job id."""

    name: str = "fifo"
    needs_oracle: ClassVar[bool] = False

    def rank(self, state: ClusterState) -> Ranking:
        return _rank_by(state)


@dataclass
class ShortestJobFirst:
    """Shortest estimated run time first (time limit x the user's limit accuracy)."""

    name: str = "sjf"
    needs_oracle: ClassVar[bool] = False

    def rank(self, state: ClusterState) -> Ranking:
        return _rank_by(state, estimated_runtimes(state))


@dataclass
class OracleShortestJobFirst:
    """SJF on the true durations. Not a baseline: an upper bound no live scheduler has."""

    name: str = "sjf-oracle"
    needs_oracle: ClassVar[bool] = True

    def rank(self, state: ClusterState) -> Ranking:
        oracle = state.queue.oracle
        if np.isnan(oracle).any():
            raise ValueError("sjf-oracle needs true durations: run it in the simulator's oracle mode")
        return _rank_by(state, oracle)


@dataclass
class FairShare:
    """Least-served user first (attained GPU-seconds of finished and running jobs), FIFO
    within a user: Slurm's fair-share factor with equal shares and no decay."""

    name: str = "fair-share"
    needs_oracle: ClassVar[bool] = False

    def rank(self, state: ClusterState) -> Ranking:
        q = state.queue
        served = state.attained_service
        per_user = np.array([served.get(u, 0.0) for u in q.users], dtype=float)
        return _rank_by(state, per_user[q.user] if len(q.users) else q.submit)


@dataclass
class Tiresias:
    """Tiresias' discretized two-dimensional LAS, made non-preemptive.

    Tiresias ranks by attained GPU-time in a few queues with exponential thresholds, so
    small jobs pass large ones. Under Slurm a pending job has attained nothing, so the
    service counted is what it asks for: GPUs x estimated run time. FIFO inside a queue;
    a job that has waited ``starvation_factor`` times its own estimate is promoted to the
    top queue (Tiresias' STARVELIMIT).
    """

    name: str = "tiresias"
    needs_oracle: ClassVar[bool] = False
    thresholds: tuple[float, ...] = (3600.0, 36_000.0, 360_000.0)  # GPU-seconds
    starvation_factor: float = 2.0

    def rank(self, state: ClusterState) -> Ranking:
        q = state.queue
        est = estimated_runtimes(state)
        queue = np.searchsorted(np.asarray(self.thresholds), q.gpus * est, side="right")
        starving = np.isfinite(est) & (state.now - q.submit > self.starvation_factor * est)
        return _rank_by(state, np.where(starving, 0, queue))


@dataclass
class SlurmMultifactor:
    """Slurm's priority/multifactor as a GPU site sets it: fair-share, age and job size.

    Each factor is what ``sprio`` showed on the lab (Slurm 22.05, Fair Tree, the default),
    times its weight, truncated as Slurm does; highest first, arrival order on ties:

    - **job size**: ``(nodes / cluster nodes + cpus / cluster CPUs) / 2``, the job's node
      count (fixed, else as few as hold its GPUs) and CPUs (at least one per node);
      without CPU counts in the topology the node share stands for both;
    - **age**: ``min(wait / PriorityMaxAge, 1)``;
    - **fair-share** (Fair Tree, all users in one account with equal shares): users ranked
      by GPU-seconds received, least first; a user's factor is ``(N - users ahead) / N``
      over the N users known, so users with equal usage share a rank. Usage is GPU
      billing (``TRESBillingWeights=GRES/gpu=1``). Its decay (PriorityDecayHalfLife, a
      week) is not modelled.

    What usage holds depends on ``AccountingStorageEnforce`` (``usage_at_end``). With
    ``limits`` in it, slurmctld charges a job's whole run when it ends
    (``acct_policy_job_fini`` calls ``priority_g_job_end``). Without, only its decay
    thread charges, at each tick, the jobs running then, for the time since the previous
    tick (``decay_apply_new_usage`` skips finished jobs): the run after a job's last tick
    is never charged, and a job shorter than ``calc_period`` may never be. On the lab
    (``associations`` only) the users running many short jobs got the highest priority.

    As in slurmctld, a job's priority is set when it is submitted and recomputed only at
    the calculation ticks, every ``calc_period`` seconds (PriorityCalcPeriod) from
    ``calc_offset``, and usage too is summed only at the ticks: service after the last tick
    counts at the next. So the chooser keeps each job's priority between ticks: one
    chooser per replay, as `make_policy` gives.

    Run with first-fit and backfill it emulates a Slurm site; ``weight_fairshare=0`` is
    a site without slurmdbd.
    """

    name: str = "slurm-multifactor"
    needs_oracle: ClassVar[bool] = False
    weight_age: float = 1000.0
    weight_size: float = 1000.0
    weight_fairshare: float = 10000.0
    max_age: float = 7 * 86_400.0
    calc_period: float = 300.0
    calc_offset: float = 0.0
    usage_at_end: bool = True
    _tick: int | None = field(default=None, init=False, repr=False, compare=False)
    _priority: dict[str, float] = field(default_factory=dict, init=False, repr=False, compare=False)
    _usage: dict[str, float] = field(default_factory=dict, init=False, repr=False, compare=False)
    _tick_time: float = field(default=-math.inf, init=False, repr=False, compare=False)
    #: The running jobs the last call saw: {job id: (user, GPUs, start)}; a job gone since ended
    #: after the tick, and its service past the tick is not in slurmctld's sum yet either.
    _seen_running: dict[str, tuple[str, int, float]] = field(default_factory=dict, init=False, repr=False,
                                                             compare=False)

    def next_change(self, now: float) -> float:
        """The first calculation tick after ``now``: the priority order may change there
        with nothing else happening, and slurmctld's backfill, which runs every pass and
        not only after an event, acts on it at its next pass (`policy.next_change`)."""
        return self.calc_offset + (math.floor((now - self.calc_offset) / self.calc_period) + 1) * self.calc_period

    def rank(self, state: ClusterState) -> Ranking:
        prio = self.priorities(state)
        return _rank_by(state, -np.array([prio[j.job_id] for j in state.pending]))

    def priorities(self, state: ClusterState) -> dict[str, float]:
        """Each pending job's priority as slurmctld holds it now (what ``sprio`` shows):
        set at the job's first sight, recomputed for all at each calculation tick."""
        q = state.queue
        k = math.floor((state.now - self.calc_offset) / self.calc_period)  # the tick's index
        if k != self._tick:  # a calculation tick passed: usage summed, every pending job anew
            tick = self.calc_offset + k * self.calc_period
            usage = self.usage_at(state, tick) if self.usage_at_end else self._charged_at_ticks(state, tick)
            self._tick, self._priority, self._usage = k, {}, usage
        self._seen_running = {r.job_id: (r.user, r.num_gpus, r.start_time) for r in state.running}
        new = np.array([j.job_id not in self._priority for j in state.pending], dtype=bool)
        if new.any():
            # the weighted factors summed, then truncated, as priority/multifactor does
            age = np.minimum(np.maximum(state.now - q.submit, 0.0) / self.max_age, 1.0)
            prio = np.floor(self.weight_age * age + self.weight_size * self.size_factors(state)
                            + self.weight_fairshare * self.fairshare_factors(q.users)[q.user])
            for i in np.flatnonzero(new).tolist():
                self._priority[state.pending[i].job_id] = float(prio[i])
        return self._priority

    @staticmethod
    def size_factors(state: ClusterState) -> np.ndarray:
        topo = state.topology
        per_node = max(1, topo.gpus_per_node)
        nodes = np.array([j.num_nodes or max(1, -(-j.num_gpus // per_node)) for j in state.pending], dtype=float)
        node_share = nodes / len(topo.nodes)
        total_cpus = sum(n.cpus for n in topo.nodes)
        if not total_cpus:
            return node_share
        cpus = np.array([max(j.cpus, 1) for j in state.pending], dtype=float)
        return (node_share + np.maximum(cpus, nodes) / total_cpus) / 2

    def usage_at(self, state: ClusterState, tick: float) -> dict[str, float]:
        """GPU-seconds per user as slurmctld summed them at ``tick`` (at or before
        ``state.now``): the running jobs' service after the tick is not in it, nor that of
        jobs that ran past the tick and ended since the last call (taken to have ended now:
        a replay decides when a job ends); every user known has an entry."""
        served = dict(state.attained_service)
        running = {r.job_id for r in state.running}
        after = [(r.user, r.num_gpus, r.start_time) for r in state.running]
        after += [v for job, v in self._seen_running.items() if job not in running]
        for user, gpus, start in after:
            if user in served:
                served[user] -= gpus * max(0.0, state.now - max(start, tick))
        for u in state.queue.users:
            served.setdefault(u, 0.0)
        return {u: max(0.0, v) for u, v in served.items()}

    def _charged_at_ticks(self, state: ClusterState, tick: float) -> dict[str, float]:
        """Usage without limits enforcement: the last sum plus, for every job running at
        ``tick`` (started before it; one gone since the last call is taken to have run
        until now), its GPU-seconds since the previous sum or its start."""
        last = self._tick_time
        usage = dict(self._usage)
        running = {r.job_id for r in state.running}
        jobs = [(r.user, r.num_gpus, r.start_time) for r in state.running]
        jobs += [v for job, v in self._seen_running.items() if job not in running]
        for user, gpus, start in jobs:
            if start < tick:
                usage[user] = usage.get(user, 0.0) + gpus * (tick - max(start, last))
        for u in state.queue.users:
            usage.setdefault(u, 0.0)
        self._tick_time = tick
        return usage

    def fairshare_factors(self, users: tuple[str, ...]) -> np.ndarray:
        """Per user of ``users``, the fair-share factor in [0, 1] from the last tick's usage
        (a user first seen since counts as one with none)."""
        if not self.weight_fairshare or not users:
            return np.zeros(len(users))
        usage = np.sort(np.fromiter(self._usage.values(), dtype=float, count=len(self._usage)))
        mine = np.array([self._usage.get(u, 0.0) for u in users])
        ahead = np.searchsorted(usage, mine, side="left")  # users with strictly less usage
        return (len(usage) - ahead) / max(1, len(usage))
