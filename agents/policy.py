"""The decision interface: one small protocol per decision, and the loop that joins them.

A policy is a *job chooser* (which job next) and a *placer* (which GPUs for it). Heuristics,
meta-heuristics and learned agents implement one or both; ``Scheduler`` joins any pair
into a ``Policy`` whose ``decide(state) -> Plan`` is all the simulator and the daemon call.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import chain
from operator import attrgetter
from typing import Protocol, cast, runtime_checkable

import numpy as np

from .fit import Booking, Fit, kept_for, running
from .plan import Hold, OrderView, Plan, Start
from .state import BY_RELEASE, ClusterState, PendingJob, RunningJob, release_order

_GPUS, _EXCLUSIVE = attrgetter("gpus"), attrgetter("exclusive")


@dataclass(frozen=True, slots=True)
class Ranking:
    """Pending-queue indices, best first (a sequence or an int array). Only the first
    ``startable`` may start now (an agent's "wait" action sets it lower); ``None`` means
    all of them."""

    order: Sequence[int] | np.ndarray
    startable: int | None = None


@runtime_checkable
class JobChooser(Protocol):
    """Orders the pending queue. Sees only ``ClusterState`` (what Slurm shows live)."""

    name: str

    @property
    def needs_oracle(self) -> bool:
        """True only for the named oracle (true durations, an upper bound): the simulator
        then fills ``PendingJob.oracle_duration``; the daemon never can."""
        ...

    def rank(self, state: ClusterState) -> Ranking: ...


@runtime_checkable
class Placer(Protocol):
    """Picks GPUs for one job among ``free`` (a bool mask over global GPU ids), or ``None``
    when the job cannot fit. Must return exactly ``job.num_gpus`` distinct free GPUs and
    honour ``job.num_nodes`` when set."""

    name: str

    def place(self, job: PendingJob, free: np.ndarray, state: ClusterState) -> tuple[int, ...] | None: ...


@runtime_checkable
class Policy(Protocol):
    """What the drivers call: a snapshot in, a plan out."""

    name: str

    @property
    def needs_oracle(self) -> bool:
        """Whether it reads true durations (see `JobChooser.needs_oracle`)."""
        ...

    def decide(self, state: ClusterState) -> Plan: ...


@dataclass
class Scheduler:
    """A job chooser and a placer run by the greedy list-scheduling loop.

    Walks the ranking and starts every job that fits. The first job that does not fit is
    *held*: the plan keeps the GPUs it is expected to get when running jobs (and, if only
    they are in its way, the jobs this plan starts) reach their time limits. Without
    backfill nothing after it starts (strict order, as ``sched/builtin``); with backfill
    (EASY, as ``sched/backfill``) a later job may start if it avoids the held GPUs (an
    exclusive held job's whole nodes) and the CPUs and memory the held job will need there,
    or its time limit ends before the held job's expected start. A job is placed only among
    the GPUs Slurm would let it use (`Fit.usable`: CPUs, memory, ``--exclusive``, GPU type,
    ``-w``/``-x``, features), and each start books its share of its nodes before the next
    job is placed.
    """

    chooser: JobChooser
    placer: Placer
    backfill: bool = False
    name: str = field(default="")

    def __post_init__(self) -> None:
        if not self.name:
            self.name = f"{self.chooser.name}+{self.placer.name}" + ("+backfill" if self.backfill else "")

    @property
    def needs_oracle(self) -> bool:
        return self.chooser.needs_oracle

    def decide(self, state: ClusterState) -> Plan:
        ranking = self.chooser.rank(state)
        order = ranking.order  # read by position: a chooser may sort only as far as it is read
        limit = len(order) if ranking.startable is None else ranking.startable
        wanted: np.ndarray | None = None  # GPUs asked, in rank order: read only behind a hold with backfill
        fit = Fit.of(state)
        free = state.free.copy()
        n_free = state.num_free
        starts: list[Start] = []
        started: list[tuple[PendingJob, Booking]] = []  # the starts: a hold may wait for them too
        hold: Hold | None = None
        unheld = free  # free GPUs a job that may outlive the hold can use
        n_unheld = n_free
        behind = fit  # the hold's nodes when it starts (`at_hold`): such a job must fit there too
        ends_in_time = np.zeros(len(order), dtype=bool)
        pos = 0
        if n_free == 0 and limit > 0:
            # A full cluster (the daemon sees one; the simulator never asks then): start
            # nothing, but keep GPUs for the head job so lower jobs cannot take them.
            hold = self._hold(state.pending[int(order[0])], free, state, fit)
        while pos < limit and n_free > 0:
            if hold is not None:
                # Behind a hold only jobs that fit what they may use are candidates: jump
                # straight to the next one instead of walking a long queue in Python.
                if wanted is None:
                    wanted = _in_order(state.queue.gpus, order, state)
                ok = (wanted[pos:limit] <= n_unheld) | (ends_in_time[pos:limit] & (wanted[pos:limit] <= n_free))
                ahead = np.flatnonzero(ok)
                if not len(ahead):
                    break
                pos += int(ahead[0])
            job = state.pending[int(order[pos])]
            outlives = hold is not None and not ends_in_time[pos]
            usable = fits_both(job, unheld, fit, behind) if outlives else fit.usable(job, free)
            pos += 1
            gpus = self.placer.place(job, usable, state) if job.num_gpus <= int(np.count_nonzero(usable)) else None
            if gpus is None:
                if hold is None:
                    hold = self._hold(job, free, state, fit, started)
                    if hold is None:
                        # It cannot fit even once every running job ends (nodes down, shape
                        # impossible): skip it rather than block the queue.
                        continue
                    if not self.backfill:
                        break
                    unheld = free.copy()
                    unheld[list(kept_for(job, hold.gpus, state.topology))] = False
                    n_unheld = int(np.count_nonzero(unheld))
                    behind = at_hold(fit, job, hold, state,
                                     also=[running(j, b, state.now) for j, b in started] if fit.cpus is not None else ())
                    ends_in_time = state.now + _in_order(state.queue.limit, order, state) <= hold.expected_start
                continue
            booking = fit.book(job, gpus)
            taken = booking[0]
            started.append((job, booking))
            if outlives:
                behind.take(job, gpus)
            free[list(taken)] = False
            n_free -= len(taken)
            if hold is not None:
                unheld[list(taken)] = False
                n_unheld = int(np.count_nonzero(unheld))
            starts.append(Start(job.job_id, tuple(int(g) for g in gpus)))
        return Plan(
            order=OrderView(state.pending, order),
            starts=tuple(starts),
            holds=(hold,) if hold is not None else (),
            waited=limit < len(order) and n_free > 0,
        )

    def _hold(self, job: PendingJob, free: np.ndarray, state: ClusterState, fit: Fit,
              started: Sequence[tuple[PendingJob, Booking]] = ()) -> Hold | None:
        """``job``'s hold behind the running jobs, or, where they never make room, behind
        this plan's ``started`` jobs too: a job blocked only by the plan's own starts is
        held at their end rather than left unprotected (jobs behind it would start
        however long they run)."""
        hold = expected_hold(job, free, state, self.placer, fit)
        if hold is None and started:
            hold = expected_hold(job, free, state, self.placer, fit,
                                 also=[running(j, booking, state.now) for j, booking in started])
        return hold


def at_hold(fit: Fit, job: PendingJob, hold: Hold, state: ClusterState, also: Sequence[RunningJob] = ()) -> Fit:
    """The account of ``hold``'s nodes when ``job`` is expected to start there: the running
    jobs on them that end by then released, ``job`` booked. A job that starts now and
    outlives the hold must fit in it as well as now, or the held job finds its CPUs or
    memory taken and does not start on time (EASY's promise; Slurm's backfill keeps them
    too). Without node capacity only GPUs count: ``fit`` itself. ``also``: the jobs this
    plan starts, booked in ``fit``, released as running ones are."""
    if fit.cpus is None:
        return fit
    then, _ = released_by(fit, state, hold.gpus, hold.expected_start, also)
    then.take(job, hold.gpus)
    return then


def released_by(fit: Fit, state: ClusterState, gpus: Sequence[int], when: float,
                also: Sequence[RunningJob] = ()) -> tuple[Fit, list[int]]:
    """A copy of ``fit`` with the running jobs (and ``also``, this plan's starts) on the
    nodes of ``gpus`` that are expected to end by ``when`` released, and the GPUs those
    give back: the nodes as a job held there finds them."""
    topo = state.topology
    nodes = set(topo.gpu_node[list(gpus)].tolist())
    then = fit.copy()
    back: list[int] = []
    for run in _by_end(state, also):  # in the order they are expected to end
        if run.expected_end(state.now) > when:
            break
        if not nodes.isdisjoint(topo.gpu_node[list(run.gpus)].tolist()):
            back.extend(then.release(run))
    return then, back


def fits_both(job: PendingJob, free: np.ndarray, now: Fit, then: Fit) -> np.ndarray:
    """The GPUs of ``free`` ``job`` may use by both accounts (``then`` from `at_hold`)."""
    usable = now.usable(job, free)
    return usable if then is now else usable & then.usable(job, free)


def next_change(policy: Policy, now: float) -> float | None:
    """When ``policy``'s decisions may next change with no job arriving or ending (after
    ``now``), or ``None`` for never. A policy or its job chooser says so through an optional
    ``next_change(now)`` method (Slurm's priority calculation ticks, `SlurmMultifactor`).

    Why: a driver that decides only when a job arrives or ends would act on such a change
    only at the next event, where slurmctld's backfill, running every pass, acts within a
    second. The simulator wakes itself there when it models Slurm's passes."""
    for part in (policy, getattr(policy, "chooser", None)):
        ask = getattr(part, "next_change", None)
        if callable(ask):
            return cast("float | None", ask(now))
    return None


def _in_order(values: np.ndarray, order: Sequence[int] | np.ndarray, state: ClusterState) -> np.ndarray:
    """A queue array in rank order. FIFO's order on an arrival-ordered queue is the
    identity: no gather of the queue then."""
    q = state.queue
    return values if order is q.arrival and q.in_arrival_order else values[np.asarray(order, dtype=np.int64)]


def expected_hold(job: PendingJob, free: np.ndarray, state: ClusterState, placer: Placer, fit: Fit | None = None,
                  also: Sequence[RunningJob] = ()) -> Hold | None:
    """Where and when ``job`` is expected to start: release running jobs' GPUs, CPUs and
    memory in order of their expected end (time limits) until ``placer`` finds room among
    the GPUs the job may use; ``None`` if it never does. ``fit``: the plan's account so far
    (default: the snapshot's), which is left as it is. ``also``: jobs the plan starts now,
    released among the running ones by their limits."""
    fit = Fit.of(state) if fit is None else fit.copy()
    future = free.copy()
    n_future = int(np.count_nonzero(future))
    runs = _by_end(state, also)
    skip = 0
    walk = len(runs)  # releases walked one by one before the rest is bisected (blocks only)
    if fit.cpus is None and state.topology.blocks is not None:
        skip = _short_under_blocks(job, future, runs, state, placer, fit)
        walk = skip + BLOCK_WALK
    elif fit.cpus is None:  # a placer that needs more than a count says how many releases are short
        short = getattr(placer, "releases_short_of", None)
        skip = short(job, future, runs, state) if short is not None else releases_short_of(job.num_gpus - n_future, runs)
    if skip:
        future[np.fromiter(chain.from_iterable(map(fit.release, runs[:skip])), np.int64)] = True
        n_future = int(np.count_nonzero(future))
    for i, run in enumerate(runs[skip:], start=skip):
        if i == walk:
            return _bisected_hold(job, future, runs[i:], state, placer, fit)
        back = fit.release(run)
        if back is run.gpus:
            future[list(back)] = True
            n_future += run.num_gpus
        else:  # an exclusive job's whole nodes
            n_future += int(np.count_nonzero(~future[list(back)]))
            future[list(back)] = True
        if n_future < job.num_gpus:
            continue
        usable = fit.usable(job, future)
        gpus = placer.place(job, usable, state) if usable is future or int(np.count_nonzero(usable)) >= job.num_gpus else None
        if gpus is not None:
            return Hold(job.job_id, tuple(int(g) for g in gpus), run.expected_end(state.now))
    return None


BLOCK_WALK = 64
"""Releases a hold under Slurm's block topology tries one by one past the point where the
job's usable GPUs first suffice, before it bisects the rest (`_bisected_hold`)."""


def _bisected_hold(job: PendingJob, free: np.ndarray, runs: tuple[RunningJob, ...], state: ClusterState,
                   placer: Placer, fit: Fit) -> Hold | None:
    """The hold at the first of ``runs`` (releases, in order, onto ``free``) after which
    ``placer`` places ``job``, found by bisection: exact where placing, once possible,
    stays possible. Under blocks a packed placement may come and go as the best block
    moves (`PackedPlacer`), so past the releases `expected_hold` walks one by one
    (`BLOCK_WALK`) the hold may come later than the first release that packs it: the
    price of a plan that at 16,384 GPUs walked thousands of releases (1.3 s)."""

    def placed(mask: np.ndarray) -> tuple[int, ...] | None:
        usable = fit.usable(job, mask)
        return placer.place(job, usable, state) if int(np.count_nonzero(usable)) >= job.num_gpus else None

    found = _first_release(free, runs, fit, lambda mask: placed(mask) is not None)
    if found is None:
        return None
    k, mask = found
    gpus = placed(mask)
    assert gpus is not None
    return Hold(job.job_id, tuple(int(g) for g in gpus), runs[k].expected_end(state.now))


def _short_under_blocks(job: PendingJob, free: np.ndarray, runs: tuple[RunningJob, ...], state: ClusterState,
                        placer: Placer, fit: Fit) -> int:
    """How many of ``runs`` (in release order) surely end with ``job`` still not placed
    among ``free`` and their GPUs, under Slurm's block topology without node capacity: those
    after which its usable GPUs (`Fit.usable`) still number fewer than it asks, found by
    bisection (once they suffice they keep sufficing: `Fit._block_room`), and no fewer than
    the placer's own bound (`PackedPlacer.releases_short_of`). Not the placer's answer
    itself: a packed placement may come and go as the best block moves, and `RandomPlacer`
    draws at every call; `expected_hold` walks on from here with the placer. Why: every job
    then asks `Fit.usable` for its block, and walking thousands of releases one by one made
    a hold at 16,384 GPUs take a second (`bench/scale.py --blocks`)."""
    found = _first_release(free, runs, fit, lambda mask: int(np.count_nonzero(fit.usable(job, mask))) >= job.num_gpus)
    if found is None:
        return len(runs)
    short = getattr(placer, "releases_short_of", None)
    return found[0] if short is None else max(found[0], short(job, free, runs, state))


def _first_release(free: np.ndarray, runs: tuple[RunningJob, ...], fit: Fit,
                   ok: Callable[[np.ndarray], bool]) -> tuple[int, np.ndarray] | None:
    """The first ``k`` (and its mask) for which ``ok`` holds of ``free`` with ``runs[: k + 1]``
    released, by bisection (exact where ``ok``, once true, stays true as more come back);
    ``None`` when it does not hold even with all of them. Without node capacity a release
    is a function of the run alone (`Fit.release`), so the masks are built from one list."""
    if not runs:
        return None
    backs = [fit.release(r) for r in runs]
    ends = np.cumsum([len(b) for b in backs])
    flat = np.fromiter(chain.from_iterable(backs), np.int64, int(ends[-1]))

    def released(k: int) -> np.ndarray:
        mask = free.copy()
        mask[flat[: ends[k]]] = True
        return mask

    lo, hi = 0, len(runs) - 1
    if not ok(released(hi)):
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        if ok(released(mid)):
            hi = mid
        else:
            lo = mid + 1
    return lo, released(lo)


def _by_end(state: ClusterState, also: Sequence[RunningJob]) -> tuple[RunningJob, ...]:
    """The running jobs and ``also`` (this plan's starts) in the order their GPUs are
    expected back (`ClusterState.running_by_end`)."""
    if not also:
        return state.running_by_end
    return release_order(sorted((*state.running_by_end, *also), key=BY_RELEASE), state.now)


def releases_short_of(need: int, runs: tuple[RunningJob, ...]) -> int:
    """How many of ``runs`` (in release order) can end and still leave fewer than ``need``
    more GPUs free, counting only those before the first exclusive one (which gives back
    whole nodes). Without node capacity a release gives back exactly its job's GPUs, so
    a hold can mark all of them free at once: walking them one by one was a fifth of a
    whole-trace replay (hundreds of running jobs at each blocked decision). Read in
    doubling chunks, since the answer is usually a handful of thousands of jobs."""
    if need <= 0:
        return 0
    done, chunk = 0, 32
    while done < len(runs):
        part = runs[done : done + chunk]
        exclusive = np.fromiter(map(_EXCLUSIVE, part), bool, len(part))
        plain = int(exclusive.argmax()) if exclusive.any() else len(part)
        counts = np.cumsum(np.fromiter(map(len, map(_GPUS, part[:plain])), np.int64, plain))
        short = int(np.searchsorted(counts, need))
        if short < plain or plain < len(part):
            return done + short
        done, need, chunk = done + plain, need - int(counts[-1]), 2 * chunk
    return done
