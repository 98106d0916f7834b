"""State to tensors: what the attentive agents see, as fixed-width arrays plus masks.

Everything here is computed from a `ClusterState` alone (what Slurm shows live): requested
GPUs, waiting times, time limits, the users' finished-job history, running jobs' time
limits and the topology. True durations are never read. The arrays are numpy (the Gymnasium
environment returns them as they are); the networks turn them into tensors.

Two views, one per agent:

* `JobView` for the job agent: one row per pending job in a *window* of the queue, two
  cluster-summary rows (the cluster now, and what running jobs' time limits say about the
  next day), and the action mask over ``window`` job slots plus one WAIT slot.
* `GpuView` for the GPU agent, once a job is chosen: one row per node (the GPU tokens are
  nodes, so a 1,024-GPU cluster is 128 tokens, not 1,024) and one row per *candidate
  placement*: topology-valid GPU sets produced by the heuristic placers and by best-fit at
  the node, switch and release-time level (see `candidates`). The agent scores candidates;
  it never composes GPU sets itself, so every action is a legal placement by construction.

What Slurm checks besides GPUs (CPUs, memory, ``--exclusive``, GPU type, ``-w``/``-x``,
features; `attentived.agents.fit`) enters as masks only: a job is feasible when it fits the
GPUs it may use, and its candidates are drawn from those GPUs. The networks' inputs are
what they were, so a trained model reads a state without node capacity exactly as before.

The queue window: with hundreds of pending jobs, encoding all of them would make attention
quadratic in the queue. The window keeps the ``window // 2`` longest-waiting jobs (so no job
starves out of sight and the agent sees whom fairness demands) and fills the rest with the
jobs that can start now, smallest estimated GPU-time first, then the remaining oldest. If
any pending job can start, a job that can start is in the window.

Scaling: times are ``log1p(seconds / 60) / 10`` (one minute to months map into [0, 1.4]),
counts are fractions of the cluster or ``log2`` of sizes, so the same weights serve a
2-node test cluster and a 128-node production one.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import overload

import numpy as np

from attentived.topology import Link, Topology
from attentived.topology.speed import SpeedModel

from .carried_plan import plan_at
from .fit import Fit
from .objective import fairness_weights
from .order import estimated_runtime, estimated_runtimes
from .placement import Consolidate, FirstFit, LoadBalance
from .plan import Plan
from .state import DOWN_SECONDS, ClusterState, PendingJob, free_counts

JOB_FEATURES = 20
SUMMARY_TOKENS = 2
SUMMARY_FEATURES = 12
NODE_FEATURES = 10
GENERATORS = ("consolidate", "first-fit", "load-balance", "best-fit-node", "best-fit-switch", "release-aligned")
"""Where candidate placements come from, in the order they are tried (duplicates merge)."""
CANDIDATE_FEATURES = 10 + len(GENERATORS)

NEIGHBOURHOOD_NODES = 128
"""Clusters up to this many nodes show the GPU agent every node (`shown_nodes`): the sizes
it trains and is evaluated on; larger ones show it the candidates' leaf switches."""

DEFAULT_WINDOW = 64
MAX_CANDIDATES = len(GENERATORS)

_NEVER = DOWN_SECONDS  # "time until free" of a GPU on a node that is down or drained
_HORIZONS = (900.0, 3600.0, 4 * 3600.0, 12 * 3600.0, 86_400.0)


@overload
def log_time(seconds: float) -> float: ...
@overload
def log_time(seconds: np.ndarray) -> np.ndarray: ...
def log_time(seconds: float | np.ndarray) -> np.ndarray | float:
    """Seconds to the agents' time scale: ``log1p(s / 60) / 10`` (1 min 0.07, 1 day 0.73)."""
    return np.log1p(np.maximum(seconds, 0.0) / 60.0) / 10.0


@dataclass(frozen=True)
class Room:
    """The GPUs one job may use now (`Fit.usable` of the free ones) and their counts."""

    free: np.ndarray
    island_free: np.ndarray
    node_free: np.ndarray
    num_free: int

    @classmethod
    def of(cls, topo: Topology, free: np.ndarray) -> Room:
        island_free, node_free = free_counts(topo, free)
        return cls(free, island_free, node_free, int(free.sum()))


@dataclass(frozen=True)
class Context:
    """Per-state arrays both views need, computed once per state."""

    state: ClusterState
    island_free: np.ndarray  # free GPUs per island
    node_free: np.ndarray  # free GPUs per node
    until_free: np.ndarray  # per GPU: seconds until expected free (0 if free, _NEVER if down)
    feasible: np.ndarray  # per pending job: can start now
    estimate: np.ndarray  # per pending job: `estimated_runtime` (inf without a limit)
    fit: Fit  # what each job may use besides free GPUs (read only here)

    @classmethod
    def of(cls, state: ClusterState) -> Context:
        island_free, node_free = state.free_counts
        until = state.release_in
        feasible = state.queue.gpus <= state.num_free
        ctx = cls(state, island_free, node_free, until, feasible, estimated_runtimes(state), Fit.of(state))
        check = state.irregular
        counted = feasible[check]  # enough free GPUs: whether they fit is asked once per request
        if counted.any():
            rows = check[counted]
            _, first, which = np.unique(state.irregular_requests[counted], return_index=True, return_inverse=True)
            fit_now = np.array([fits(j, (room := ctx.room(j)).num_free, room.node_free)
                                for j in (state.pending[int(i)] for i in rows[first])], dtype=bool)
            feasible[rows] = fit_now[which]
        return ctx

    def room(self, job: PendingJob) -> Room:
        """The GPUs ``job`` may use now (all free ones unless Slurm would refuse some)."""
        free = self.state.free
        usable = self.fit.usable(job, free)
        if usable is free:
            return Room(free, self.island_free, self.node_free, self.state.num_free)
        return Room.of(self.state.topology, usable)


def start_delays(ctx: Context, gpus: np.ndarray) -> np.ndarray:
    """Seconds until jobs asking ``gpus`` could start, by GPU count, if running jobs end
    at their time limits (0 for those that fit now; shapes ignored)."""
    state = ctx.state
    releases = np.sort(ctx.until_free[~state.free])
    capacity = state.num_free + np.arange(1, len(releases) + 1)  # free after each release
    at = np.searchsorted(capacity, gpus)
    return np.where(gpus <= state.num_free, 0.0, np.append(releases, _NEVER)[at])


def job_urgency(ctx: Context, slowdown: bool = True) -> np.ndarray:
    """Per pending job, the log of its user's fairness weight (`fairness_weights`: the
    larger of the user's projected mean wait and slowdown over the users' mean, squared,
    per job of theirs; 0 for an average user), over 4 and clipped to [-3, 3]. The look-ahead at setting W weighs a
    job's completion time by ``(1 - W) + W * weight``; a model that takes W reads this
    beside it, so following its teacher across W needs no re-derivation of the weight
    from the users' histories. ``slowdown=False``: the wait ratio alone, as models
    trained before the slowdown ratio read it (`NetConfig.slowdown_urgency`)."""
    q = ctx.state.queue
    if not len(q.gpus):
        return np.zeros(0, np.float32)
    weight = fairness_weights(ctx.state, start_delays(ctx, q.gpus.astype(float)), ctx.estimate, slowdown)
    return np.clip(np.log(np.maximum(weight, 1e-12)) / 4.0, -3.0, 3.0).astype(np.float32)


PLAN_FIRST, PLAN_LATER = 1.0, 0.5
"""`plan_marks`: the mark of the job a plan starts first, and of the others it starts now."""


def plan_marks(plan: Plan, state: ClusterState, idx: np.ndarray) -> np.ndarray:
    """What a plan for ``state`` (the look-ahead's, at the model's W) says of the queue
    indices ``idx`` and of WAIT, [len(idx) + 1] float32: `PLAN_FIRST` for the job it
    starts first, `PLAN_LATER` for the other jobs it starts now, 0 for the rest; WAIT's
    is `PLAN_FIRST` when the plan starts nothing (it holds GPUs or has nothing that fits).

    Why: the look-ahead's teacher labels are its first start, computed from a simulation
    of the queue's future that one encoding of the queue does not see. Given the plan as
    an input, a network begins where its teacher is and learns where to depart from it."""
    marks = np.zeros(len(idx) + 1, np.float32)
    if not plan.starts:
        marks[-1] = PLAN_FIRST
        return marks
    rank = {s.job_id: PLAN_FIRST if k == 0 else PLAN_LATER for k, s in enumerate(plan.starts)}
    pending = state.pending
    for slot, i in enumerate(idx):
        marks[slot] = rank.get(pending[int(i)].job_id, 0.0)
    return marks


def fits(job: PendingJob, num_free: int, node_free: np.ndarray) -> bool:
    """Whether some placement of ``job`` exists on the free GPUs (every placer finds one then)."""
    if job.num_gpus > num_free:
        return False
    if job.num_nodes is None:
        return True
    return int((node_free >= job.num_gpus // job.num_nodes).sum()) >= job.num_nodes


# ---- the job agent's view ----


@dataclass(frozen=True)
class JobView:
    """The job agent's input. ``index[i]`` is the pending-queue index of slot ``i`` (-1 pads)."""

    jobs: np.ndarray  # [W, JOB_FEATURES] float32
    summary: np.ndarray  # [SUMMARY_TOKENS, SUMMARY_FEATURES] float32
    valid: np.ndarray  # [W] bool: the slot holds a job
    feasible: np.ndarray  # [W] bool: that job can start now
    index: np.ndarray  # [W] int64
    wait_allowed: bool
    urgency: np.ndarray  # [W] float32: `job_urgency` of each slot's job (0 pads; all 0 unless asked for)
    plan: np.ndarray  # [W + 1] float32: `plan_marks` of the slots, then WAIT (all 0 unless a planner is set)

    @property
    def action_mask(self) -> np.ndarray:
        """[W + 1] bool: the feasible jobs, then WAIT."""
        return np.append(self.feasible, self.wait_allowed)


def wait_allowed(ctx: Context) -> bool:
    """WAIT needs something running (otherwise nothing would ever free a GPU and the
    simulation would stall); it is also the only action when no job can start."""
    return bool(ctx.state.running) or not ctx.feasible.any()


def select_window(ctx: Context, window: int, include: Sequence[int] = ()) -> np.ndarray:
    """Pending-queue indices shown to the job agent (see the module docstring), oldest
    first. ``include`` (queue indices, at most ``window // 2``) are forced in, in place of
    the last jobs picked, so the oldest half stays."""
    q = ctx.state.queue
    n = len(q.seq)
    if n <= window:
        return q.arrival
    by_age = q.arrival  # arrival order: submit time, then job id
    oldest = by_age[: window // 2]
    taken = np.zeros(n, bool)
    taken[oldest] = True
    gpu_time = q.gpus * ctx.estimate
    startable = np.flatnonzero(ctx.feasible & ~taken)
    startable = startable[np.lexsort((q.seq[startable], gpu_time[startable]))][: window - len(oldest)]
    taken[startable] = True
    rest = by_age[~taken[by_age]][: window - len(oldest) - len(startable)]
    picked = np.concatenate([oldest, startable, rest])
    if len(include):
        forced = np.asarray(list(dict.fromkeys(include)), np.int64)[: window // 2]
        others = picked[~np.isin(picked, forced)]
        picked = np.concatenate([others[: window - len(forced)], forced])
    return picked[np.argsort(q.seq[picked], kind="stable")]


class FeatureEncoder:
    """Builds `JobView` s and `GpuView` s. Keeps one `SpeedModel` per topology, since the
    communication sensitivity of a job and the cost of a candidate come from its profile."""

    def __init__(self, window: int = DEFAULT_WINDOW, max_candidates: int = MAX_CANDIDATES, urgency: bool = False) -> None:
        """``urgency``: fill `JobView.urgency` (zeros otherwise: only models that read it
        pay for it)."""
        if window < 1 or max_candidates < 1:
            raise ValueError("window and max_candidates must be positive")
        self.window = window
        self.max_candidates = max_candidates
        self.urgency = urgency
        self.slowdown_urgency = True  # `job_urgency`'s ``slowdown``: a loaded model sets what it was trained on
        #: The look-ahead whose plan fills `JobView.plan` (`plan_marks`), for models that
        #: read it (`NetConfig.plan_input`); ``None``: zeros.
        self.planner: Callable[[ClusterState], Plan] | None = None
        self._planned: tuple[ClusterState, Plan] | None = None
        self._speed: dict[int, tuple[SpeedModel, str]] = {}

    def plan_of(self, state: ClusterState) -> Plan | None:
        """`planner`'s plan for ``state`` (``None`` without a planner), computed once per
        snapshot: the GPU phase, a WAIT and the training's teacher read the plan of the
        job view just built. Where ``state`` is the last plan's state with some of its
        starts made, what is left of that plan is the plan (`carried_plan`)."""
        if self.planner is None:
            return None
        self._planned = (state, plan_at(state, self._planned, self.planner))
        return self._planned[1]

    def speed(self, topo: Topology) -> SpeedModel:
        return self._speed_and_default(topo)[0]

    def _speed_and_default(self, topo: Topology) -> tuple[SpeedModel, str]:
        """The topology's speed model and the profile with the median communication/compute
        ratio, the stand-in for jobs that declare no model the speed model knows."""
        cached = self._speed.get(id(topo))
        if cached is None or cached[0].topology is not topo:
            speed = SpeedModel(topo)
            items = sorted(speed.profiles.items(), key=lambda kv: (kv[1].grad_gbytes / kv[1].compute_s, kv[0]))
            cached = self._speed[id(topo)] = (speed, items[len(items) // 2][0])
        return cached

    def profile_name(self, job: PendingJob, topo: Topology) -> str:
        """The speed profile of ``job``: its declared model, else the median-ratio stand-in."""
        speed, default = self._speed_and_default(topo)
        return job.model if job.model is not None and job.model in speed.profiles else default

    def comm_ratio(self, job: PendingJob, topo: Topology) -> float:
        """Communication sensitivity: seconds of all-reduce over the network per second of
        compute, per step (``grad_gbytes / network GB/s / compute_s``)."""
        p = self.speed(topo).profiles[self.profile_name(job, topo)]
        return p.grad_gbytes / topo.bandwidths.network / p.compute_s

    # ---- jobs ----

    def jobs(self, ctx: Context, include: int | None = None) -> JobView:
        """The job agent's view; ``include`` forces that pending-queue index into the window,
        as the plan (for a model that reads one) forces in the jobs it starts now: a plan's
        job outside the window could not be taken, and on a held-out window the look-ahead's
        protected job, neither old nor small enough to be shown, waited out of sight for
        hours while the model started others."""
        W = self.window
        planned = self.plan_of(ctx.state)
        forced = [] if include is None else [include]
        if planned is not None and planned.starts:
            at = {j.job_id: i for i, j in enumerate(ctx.state.pending)} if len(ctx.state.pending) > W else {}
            forced += [at[s.job_id] for s in planned.starts if s.job_id in at]
        idx = select_window(ctx, W, forced)
        k = len(idx)
        jobs = np.zeros((W, JOB_FEATURES), np.float32)
        valid = np.zeros(W, bool)
        feasible = np.zeros(W, bool)
        index = np.full(W, -1, np.int64)
        valid[:k] = True
        index[:k] = idx
        feasible[:k] = ctx.feasible[idx]
        urgency = np.zeros(W, np.float32)
        plan = np.zeros(W + 1, np.float32)
        if k:
            jobs[:k] = self._job_rows(ctx, idx)
            if self.urgency:
                urgency[:k] = job_urgency(ctx, self.slowdown_urgency)[idx]
        if planned is not None:
            marks = plan_marks(planned, ctx.state, idx)
            plan[:k], plan[W] = marks[:k], marks[k]
        return JobView(jobs, self._summary(ctx), valid, feasible, index, wait_allowed(ctx), urgency, plan)

    def _job_rows(self, ctx: Context, idx: np.ndarray) -> np.ndarray:
        """Feature rows of the pending jobs ``idx`` (queue indices), in that order."""
        state, topo = ctx.state, ctx.state.topology
        now, total = state.now, topo.num_gpus
        window = [state.pending[i] for i in idx]
        feasible = ctx.feasible[idx]
        q = state.queue
        k = len(window)
        gpus = q.gpus[idx].astype(float)
        wait = np.maximum(now - q.submit[idx], 0.0)
        est = ctx.estimate[idx]
        has_limit = np.isfinite(est)
        est_f = np.where(has_limit, est, 0.0)
        served = state.attained_service
        total_served = sum(served.values()) or 1.0
        pending_by_user = np.bincount(q.user, minlength=len(q.users))[q.user[idx]]
        users = [state.user(j.user) for j in window]
        accuracy = [u.limit_accuracy for u in users]
        start_in = start_delays(ctx, gpus)
        max_island, max_node = int(ctx.island_free.max()), int(ctx.node_free.max())
        mean_wait = wait.mean() or 1.0
        log_est = np.log1p(est_f / 60.0)
        median_est = float(np.median(log_est[has_limit])) if has_limit.any() else 0.0
        rows = np.zeros((k, JOB_FEATURES), np.float32)
        rows[:, 0] = np.log2(gpus) / 6.0
        rows[:, 1] = np.minimum(gpus / max(state.num_free, 1), 2.0)
        rows[:, 2] = gpus / total
        rows[:, 3] = log_time(wait)
        rows[:, 4] = has_limit
        rows[:, 5] = log_time(est_f)
        rows[:, 6] = np.log1p(gpus * est_f / 60.0) / 12.0
        rows[:, 7] = [served.get(j.user, 0.0) / total_served for j in window]
        rows[:, 8] = [log_time(u.mean_wait) for u in users]
        rows[:, 9] = pending_by_user / len(state.pending)
        rows[:, 10] = [1.0 if a is None else a for a in accuracy]
        rows[:, 11] = [a is not None for a in accuracy]
        rows[:, 12] = [math.log1p(self.comm_ratio(j, topo)) if j.num_gpus > 1 else 0.0 for j in window]
        rows[:, 13] = feasible
        rows[:, 14] = [j.num_nodes is not None for j in window]
        rows[:, 15] = np.where(gpus <= max_island, 1.0, np.where(gpus <= max_node, 0.5, 0.0))
        rows[:, 16] = log_time(start_in)
        rows[:, 17] = np.where(has_limit, (log_est - median_est) / 5.0, 1.0)
        rows[:, 18] = wait / mean_wait / 4.0
        rows[:, 19] = np.arange(k) / max(k - 1, 1)  # rank by age inside the window
        return rows

    def _summary(self, ctx: Context) -> np.ndarray:
        state, topo = ctx.state, ctx.state.topology
        total = topo.num_gpus
        out = np.zeros((SUMMARY_TOKENS, SUMMARY_FEATURES), np.float32)
        pending, q = state.pending, state.queue
        demand = int(q.gpus.sum())
        waits = np.maximum(state.now - q.submit, 0.0)
        users = {q.users[u] for u in np.unique(q.user)}
        now = out[0]
        now[0] = state.num_free / total
        now[1] = float((ctx.island_free == topo.island_size).mean())
        now[2] = float((ctx.node_free == np.diff(topo.node_first_gpu)).mean())
        now[3] = math.log2(total) / 12.0
        now[4] = ctx.island_free.max() / topo.island_size.max()
        now[5] = ctx.node_free.max() / topo.gpus_per_node
        now[6] = len(state.running) / total
        now[7] = math.log1p(len(pending)) / 8.0
        now[8] = math.log1p(demand / total)
        now[9] = float(ctx.feasible.mean()) if len(pending) else 0.0
        now[10] = log_time(float(np.mean(waits))) if len(waits) else 0.0
        now[11] = len(users) / max(len(set(state.users) | users), 1)
        future = out[1]
        busy = ctx.until_free[~state.free]
        for h, horizon in enumerate(_HORIZONS):
            future[h] = (state.num_free + int((busy <= horizon).sum())) / total
        live = busy[busy < _NEVER]
        future[5] = log_time(float(live.min())) if len(live) else 0.0
        future[6] = float((live == 0).mean()) if len(live) else 0.0
        future[7] = float(log_time(live).mean()) if len(live) else 0.0
        future[8] = 1.0 - (state.num_free + len(live)) / total  # down or drained
        return out

    # ---- GPUs ----

    def gpus(self, ctx: Context, job: PendingJob) -> GpuView:
        """The GPU agent's input for ``job`` (which must fit now)."""
        return self.gpu_view(ctx, job, self.candidates(ctx, job))

    def candidates(self, ctx: Context, job: PendingJob) -> list[Candidate]:
        """The first ``max_candidates`` of `candidates` for ``job``, which must fit now."""
        cands = candidates(job, ctx)
        if not cands:
            raise ValueError(f"job {job.job_id} cannot start now: no candidate placement")
        return cands[: self.max_candidates]

    def gpu_view(self, ctx: Context, job: PendingJob, cands: list[Candidate]) -> GpuView:
        state, topo = ctx.state, ctx.state.topology
        speed = self.speed(topo)
        N, K = len(topo.nodes), self.max_candidates
        shown = shown_nodes(topo, cands)
        nodes = _node_rows(ctx, shown)
        local_of = np.full(N, -1)
        local_of[shown] = np.arange(len(shown))
        rows = np.zeros((K, CANDIDATE_FEATURES), np.float32)
        share = np.zeros((K, len(shown)), np.float32)
        valid = np.zeros(K, bool)
        est = estimated_runtime(job, state)
        log_est = float(log_time(est)) if math.isfinite(est) else 1.5
        node_size = np.diff(topo.node_first_gpu)
        whole_island = ctx.island_free == topo.island_size
        whole_node = ctx.node_free == node_size
        busy = ~state.free
        scored: list[Candidate] = []
        model = self.profile_name(job, topo)
        for c, cand in enumerate(cands):
            g = np.asarray(cand.gpus)
            slowdown = speed.slowdown(model, cand.gpus)
            link, _ = topo.bottleneck(cand.gpus)
            isl = np.unique(topo.gpu_island[g])
            on_node = np.bincount(topo.gpu_node[g], minlength=N)  # (np.unique and np.isin cost 5x more here)
            nds = np.flatnonzero(on_node)
            per_node = on_node[nds]
            sws = np.unique(topo.gpu_switch[g])
            near = _node_gpus(topo, nds)  # the GPUs of the nodes it touches
            busy_near = ctx.until_free[near[busy[near]]]
            release = float(log_time(busy_near.max())) if len(busy_near) else 0.0
            row = rows[c]
            row[0] = math.log(slowdown)  # may be < 0: the speed model can beat `ideal_gpus`
            row[1] = int(link) / int(Link.SPINE)
            row[2] = math.log2(len(isl)) / 6.0
            row[3] = math.log2(len(nds)) / 6.0
            row[4] = math.log2(len(sws)) / 4.0
            row[5] = whole_island[isl].sum() / len(isl)  # whole free islands it breaks
            row[6] = whole_node[nds].sum() / len(nds)  # whole free nodes it breaks
            row[7] = (ctx.node_free[nds].sum() - len(g)) / node_size[nds].sum()
            row[8] = release
            row[9] = abs(release - log_est)
            for name in cand.sources:
                row[10 + GENERATORS.index(name)] = 1.0
            share[c, local_of[nds]] = per_node / len(g)
            valid[c] = True
            scored.append(Candidate(cand.gpus, cand.sources, slowdown, link))
        return GpuView(nodes, rows, share, valid, tuple(scored), shown)


def _node_rows(ctx: Context, shown: np.ndarray) -> np.ndarray:
    """Feature rows of the nodes ``shown`` (node indices, ascending). Per-GPU work is done
    on their GPUs only, so a view of a few dozen nodes of a 2,048-node cluster costs what
    a small cluster's does; switch-level columns are over whole switches."""
    state, topo = ctx.state, ctx.state.topology
    N, M = len(topo.nodes), len(shown)
    size_all = np.diff(topo.node_first_gpu)
    size = size_all[shown]
    offsets = np.cumsum(size) - size  # each shown node's first row among ``gpus``
    gpus = _node_gpus(topo, shown)
    local = np.repeat(np.arange(M), size)
    until = ctx.until_free[gpus]
    busy = ~state.free[gpus] & (until < _NEVER)
    t = log_time(until)
    n_busy = np.bincount(local, weights=busy, minlength=M)
    sum_t = np.bincount(local, weights=np.where(busy, t, 0.0), minlength=M)
    min_t = np.minimum.reduceat(np.where(busy, t, np.inf), offsets)
    max_t = np.maximum.reduceat(np.where(busy, t, 0.0), offsets)
    down = np.bincount(local, weights=until >= _NEVER, minlength=M)
    local_of = np.full(N, -1)
    local_of[shown] = np.arange(M)
    isl_local = local_of[topo.island_node]
    keep = isl_local >= 0
    isl_local = isl_local[keep]
    island_free = ctx.island_free[keep]
    island_size = topo.island_size[keep]
    whole_islands = np.bincount(isl_local, weights=island_free == island_size, minlength=M)
    islands = np.bincount(isl_local, minlength=M)
    best_island = np.zeros(M)
    np.maximum.at(best_island, isl_local, island_free / island_size)
    switch_free = np.bincount(topo.node_switch, weights=ctx.node_free, minlength=len(topo.switch_names))
    switch_size = np.bincount(topo.node_switch, weights=size_all, minlength=len(topo.switch_names))
    sw = topo.node_switch[shown]
    size = size.astype(float)
    rows = np.zeros((M, NODE_FEATURES), np.float32)
    rows[:, 0] = ctx.node_free[shown] / size
    rows[:, 1] = whole_islands / islands
    rows[:, 2] = best_island
    rows[:, 3] = np.where(n_busy > 0, sum_t / np.maximum(n_busy, 1), 0.0)
    rows[:, 4] = np.where(n_busy > 0, min_t, 0.0)
    rows[:, 5] = max_t
    rows[:, 6] = (switch_free / switch_size)[sw]
    rows[:, 7] = size / topo.gpus_per_node
    rows[:, 8] = down / size
    rows[:, 9] = (switch_size / topo.num_gpus)[sw]
    return rows


def _node_gpus(topo: Topology, nodes: np.ndarray) -> np.ndarray:
    """Global ids of every GPU of ``nodes`` (node indices), node by node."""
    size = np.diff(topo.node_first_gpu)[nodes]
    offsets = np.cumsum(size) - size
    return np.repeat(topo.node_first_gpu[nodes] - offsets, size) + np.arange(int(size.sum()))


def shown_nodes(topo: Topology, cands: Sequence[Candidate]) -> np.ndarray:
    """The nodes the GPU agent sees for these candidates: every node up to
    `NEIGHBOURHOOD_NODES`; beyond, the nodes under the leaf switches the candidates touch
    (a hierarchical view: which switch, then which node, then which GPUs). Attention over
    2,048 node tokens per placement made a plan on 16,384 GPUs take seconds, and no node
    outside those switches changes what a candidate costs or frees."""
    n = len(topo.nodes)
    if n <= NEIGHBOURHOOD_NODES:
        return np.arange(n)
    touched = np.zeros(len(topo.switch_names), bool)
    for c in cands:
        touched[topo.gpu_switch[list(c.gpus)]] = True
    return np.flatnonzero(touched[topo.node_switch])


# ---- candidate placements ----


@dataclass(frozen=True)
class Candidate:
    """One topology-valid GPU set for the chosen job. ``slowdown`` (run time vs the ideal
    placement, from the speed model and the job's declared model) and ``link`` (slowest
    link inside the set) are filled in `GpuView`; generators leave them at 1 / SELF."""

    gpus: tuple[int, ...]
    sources: tuple[str, ...]
    slowdown: float = 1.0
    link: Link = Link.SELF


@dataclass(frozen=True)
class GpuView:
    """The GPU agent's input. Row ``n`` of ``nodes`` is node ``shown[n]`` (`shown_nodes`:
    all of them on clusters the agent trains on); ``share[k, n]``: fraction of the job's
    GPUs candidate ``k`` puts on that node (how a candidate points at the node tokens)."""

    nodes: np.ndarray  # [N, NODE_FEATURES] float32
    candidates: np.ndarray  # [K, CANDIDATE_FEATURES] float32
    share: np.ndarray  # [K, N] float32
    valid: np.ndarray  # [K] bool
    placements: tuple[Candidate, ...]
    shown: np.ndarray  # [N] int64 node indices


Generator = Callable[[PendingJob, Context, Room], tuple[int, ...] | None]


def candidates(job: PendingJob, ctx: Context) -> list[Candidate]:
    """Distinct GPU sets for ``job`` among the GPUs it may use (`Context.room`), from every
    generator in `GENERATORS` order; a set that several generators propose is one
    candidate listing all of them. Only sets as tight as `Consolidate`'s are kept (see
    `tightness`): a job is never split over islands, nodes or switches when a tighter set
    exists, nor breaks more whole free islands than the best fit, so whatever the GPU agent
    picks, it cannot place a job worse than consolidation would by those measures."""
    room = ctx.room(job)
    if not fits(job, room.num_free, room.node_free):
        return []
    out: dict[tuple[int, ...], list[str]] = {}
    for name in GENERATORS:
        gpus = _GENERATORS[name](job, ctx, room)
        if gpus is not None:
            out.setdefault(tuple(sorted(int(g) for g in gpus)), []).append(name)
    topo = ctx.state.topology
    whole = ctx.island_free == topo.island_size
    keys = {g: tightness(topo, g, whole) for g in out}
    bound = next(keys[g] for g, src in out.items() if "consolidate" in src)
    return [Candidate(g, tuple(src)) for g, src in out.items() if keys[g] <= bound]


def tightness(topo: Topology, gpus: tuple[int, ...], whole_island: np.ndarray) -> tuple[int, int]:
    """How loosely ``gpus`` sit, smaller is tighter: the level of the smallest group that
    holds them all (0 one NVLink island, 1 one node, 2 one leaf switch, 3 beyond), then how
    many wholly free islands (``whole_island``) they break."""
    g = np.asarray(gpus)
    islands = np.unique(topo.gpu_island[g])
    if len(islands) == 1:
        level = 0
    elif (topo.gpu_node[g] == topo.gpu_node[g[0]]).all():
        level = 1
    elif (topo.gpu_switch[g] == topo.gpu_switch[g[0]]).all():
        level = 2
    else:
        level = 3
    return level, int(whole_island[islands].sum())


def _placer(placer) -> Generator:
    return lambda job, ctx, room: placer.place(job, room.free, ctx.state)


def _fill(ctx: Context, room: Room, nodes: np.ndarray, n: int) -> tuple[int, ...]:
    """``n`` usable GPUs from ``nodes`` in order, each node's fullest islands first."""
    topo, free = ctx.state.topology, room.free
    out: list[int] = []
    for ni in nodes:
        isl = topo.node_islands[int(ni)]
        for k in isl[np.argsort(-room.island_free[isl], kind="stable")]:
            g = topo.island_gpus[k]
            out.extend(int(x) for x in g[free[g]][: n - len(out)])
            if len(out) == n:
                return tuple(out)
    raise AssertionError("caller checked capacity")


def _best_fit_node(job: PendingJob, ctx: Context, room: Room) -> tuple[int, ...] | None:
    """The fullest node that holds the whole job (ignoring islands)."""
    if job.num_nodes is not None:
        return None
    fits_ = np.flatnonzero(room.node_free >= job.num_gpus)
    if not len(fits_):
        return None
    return _fill(ctx, room, fits_[[int(np.argmin(room.node_free[fits_]))]], job.num_gpus)


def _best_fit_switch(job: PendingJob, ctx: Context, room: Room) -> tuple[int, ...] | None:
    """The fullest leaf switch that holds the job, its freest nodes first."""
    if job.num_nodes is not None:
        return None
    topo = ctx.state.topology
    switch_free = np.bincount(topo.node_switch, weights=room.node_free, minlength=len(topo.switch_names))
    fits_ = np.flatnonzero(switch_free >= job.num_gpus)
    if not len(fits_):
        return None
    best = int(fits_[np.argmin(switch_free[fits_])])
    nodes = np.flatnonzero((topo.node_switch == best) & (room.node_free > 0))
    return _fill(ctx, room, nodes[np.argsort(-room.node_free[nodes], kind="stable")], job.num_gpus)


def _release_aligned(job: PendingJob, ctx: Context, room: Room) -> tuple[int, ...] | None:
    """The island (or node, for jobs bigger than an island) whose busy GPUs are expected
    back closest to when this job is expected to end, so groups free up whole together."""
    if job.num_nodes is not None:
        return None
    state, topo = ctx.state, ctx.state.topology
    est = estimated_runtime(job, state)
    target = log_time(est) if math.isfinite(est) else 1.5
    release = log_time(ctx.until_free)
    release = np.where(state.free, 0.0, release)
    if job.num_gpus <= int(topo.island_size.max()):
        groups, free = topo.gpu_island, room.island_free
    else:
        groups, free = topo.gpu_node, room.node_free
    fits_ = np.flatnonzero(free >= job.num_gpus)
    if not len(fits_):
        return None
    latest = np.zeros(len(free))
    np.maximum.at(latest, groups, release)
    best = int(fits_[np.argmin(np.abs(latest[fits_] - target))])
    if groups is topo.gpu_island:
        g = topo.island_gpus[best]
        return tuple(int(x) for x in g[room.free[g]][: job.num_gpus])
    return _fill(ctx, room, np.array([best]), job.num_gpus)


_GENERATORS: dict[str, Generator] = {
    "consolidate": _placer(Consolidate()),
    "first-fit": _placer(FirstFit()),
    "load-balance": _placer(LoadBalance()),
    "best-fit-node": _best_fit_node,
    "best-fit-switch": _best_fit_switch,
    "release-aligned": _release_aligned,
}
