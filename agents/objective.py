"""What the meta-heuristics optimise: a look-ahead list schedule of the queue and one cost.

The genetic algorithm and simulated annealing (``genetic.py``, ``annealing.py``) search
*solutions* for a window of the pending queue: an order of its jobs and, per job, a
placement gene. They compare solutions with `LookAhead.evaluate`, which must cost tens of
microseconds, so the model is deliberately coarse:

* **Window.** At most ``size`` jobs: the heads of the FIFO, shortest-estimate-first and
  least-served-user-first orders and, with a fairness setting W > 0, of the blended
  cost's own order (estimate / urgency ascending, see the cost), interleaved (so old,
  short, starved jobs and the worst-off users' jobs are all candidates), plus up to a
  quarter of the window from the rest of the queue that fit the free GPUs now (so a
  search can fill idle GPUs the heads cannot use). Jobs that cannot fit even when every
  running job ends are left out (the scheduling loop skips them too).
* **List schedule on per-node free counts** (``model="backfill"``, the default). The
  window is played out event by event, as the scheduling loop would re-plan it: at each
  instant every job that fits starts, in the solution's priority order; the first job
  that does not fit gets a *shadow time* (when enough GPUs are back, by count), and a
  later job may start before it only if it ends by then or uses GPUs spare at that time
  (EASY backfill). After ``DEPTH`` release events the rest of the window is a fluid
  tail: each job starts once the GPU-seconds running and ahead of it have drained
  through the cluster. ``model="serial"`` is the simpler serial schedule (start times
  never decrease: a job waits for every job ahead of it), kept for comparison.
* **Estimates only.** GPUs come back when running and newly started jobs reach their
  *estimated* end: time limit x the user's limit accuracy (`estimated_runtimes`), never
  the true duration; a running job already past its estimate is expected halfway
  between now and its limit (an overdue job is evidence of a long one; expecting it to
  end *now* made waiting look free and the search keep GPUs idle).
* **Placement gene ``pack``.** With ``pack`` a job waits until its GPUs fit on the fewest
  nodes (one node when it can); without it the job starts as soon as enough GPUs are free
  anywhere, on the fullest nodes, and runs ``slowdown(model, spread)`` times longer (the
  speed model's price of the spread for the job's declared model). Inside a node the
  model picks the tightest node (best fit), as the consolidating placer does.
* **Cost** (lower is better), with the fairness setting W in [0, 1] (`check_fairness`;
  0 = completion time only, 1 = protect the worst-off users most)::

      w_jct  * ((1 - W) * sum(c_j) + W * sum(f_j * c_j)) / (n * mean estimate)
    + w_comm * sum((slowdown - 1) * estimate * gpus) / sum(estimate * gpus)

  where ``c_j = start - now + slowdown * estimate`` is window job j's remaining
  completion time. The first term is the window's remaining completion time in units of
  its mean job, each job weighted by its *urgency* ``(1 - W) + W * f_j``. ``f_j`` is the
  fairness weight of the job's user, fixed for the decision (it depends on the state,
  never on the solution; `fairness_weights`): the larger of the user's projected mean
  wait (finished and running jobs at their waits, pending jobs at their wait so far plus
  the time until enough GPUs come back for them) over the users' mean, and the user's
  projected slowdown (that wait against their pending jobs' estimates) over the users'
  mean, to the power ``FAIRNESS_POWER``, times
  ``(mean count / the user's job count) ** COUNT_EXPONENT`` (a job of a user with few
  jobs moves that user's mean wait more), normalised to mean 1 over the window. Every
  weight is positive, so the cost never decreases when any job starts later: it never
  rewards delaying anyone to equalise waits (the Jain index over users' mean waits,
  which the cost used to carry, did, and stays a reported metric only). The second is
  the fraction of the window's GPU time lost to spread placements.

* **Protected jobs** (``protect`` = S > 0; off by default): a window job whose wait has
  slowed it down S times by estimate, ``(wait + estimate) / estimate``, is first in every
  order the model plays (`LookAhead.ordered`; among them the cost's own order), so the
  list schedule reserves for the first that does not fit (`protected_first`).

The jobs the model starts *now* (`Schedule.now`) are the decision: the chooser ranks them
first and passes their count to the scheduling loop as ``Ranking.startable``, so "wait
for a packed placement" and "keep GPUs for a blocked job" are decisions the loop carries
out. The rest of the schedule is only the model's guess at the decision's consequences.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain

import numpy as np

from attentived.topology import Topology
from attentived.topology.speed import SpeedModel

from .fit import Fit, when_all_end
from .order import estimated_runtimes
from .state import ClusterState

NO_LIMIT_SECONDS = 7 * 86_400.0
"""Run time assumed for a job without a time limit (it may run for ever)."""

DEPTH = 12
"""Release events the backfill model plays out event by event; after them, a fluid tail."""

MIN_SCALE_SECONDS = 60.0
"""Floor of the time unit of the JCT term, so a window of seconds-long jobs stays stable;
also the floor added to users' projected mean waits in the fairness weights."""

DEFAULT_FAIRNESS = 0.75
"""The fairness setting W of the look-ahead policies when none is given. On 16 held-out
Philly windows x 2 seeds (bench/fairness_knob.py) the average JCT of ``portfolio`` and
``genetic`` is 0.9% and 0.4% lower than under the cost this term replaced (w_jct = 1
with 2 x (1 - Jain over users' mean waits)), and the worst user's mean wait 20% and 1%
lower."""

FAIRNESS_POWER = 2.0
"""How steeply a user's fairness weight grows with their projected mean wait over the
users' mean (the exponent of the ratio)."""

COUNT_EXPONENT = 1.0
"""How a user's fairness weight scales with 1 / their job count: one job's wait moves the
mean wait of a user with few jobs more (1: exactly the derivative of the mean)."""


PROTECT_OFF = 0.0
"""The ``protect`` setting that protects no job: the default (docs/agents.md, "A bound on
slowdown", says where the guard pays and where it costs)."""


def check_protect(protect: float | str) -> float:
    """``protect`` (a number, or its text in a policy name) as a float; ValueError unless
    it is 0 (off) or a bounded slowdown of at least 1."""
    s = float(protect)
    if not (s == PROTECT_OFF or 1.0 <= s < math.inf):  # also refuses nan
        raise ValueError(f"protect must be 0 (off) or a slowdown of at least 1, got {protect!r}")
    return s


def protected_first(state: ClusterState, est: np.ndarray, urgency: np.ndarray, protect: float) -> np.ndarray:
    """Queue indices of the pending jobs their wait has slowed down by ``protect`` at least
    (wait so far + estimate, over the estimate floored at `MIN_SCALE_SECONDS`), in the
    order they go first: the blended cost's own (estimate / ``urgency``, Smith's rule; by
    estimate alone at W = 0), then arrival. ``est`` and ``urgency`` are per pending job;
    a job without a limit (``est`` infinite) counts as running `NO_LIMIT_SECONDS`.

    Why a guard and not a weight: a completion-time objective starts a one-GPU job on every
    GPU that frees while a short job of two or four GPUs waits for them to free at once;
    each decision's plan has it start soon, the next decision's plan again later (on a
    validation window a 28-second two-GPU job waited two hours). A protected job is first
    in every plan, so the list schedule reserves GPUs for it and only what does not delay
    it starts before it, as a blocked head under EASY backfill. Among protected jobs the
    cost's own order: on the validation days, most slowed first raised `portfolio`'s Jain
    index over users' slowdowns less (0.717 against 0.757) at the same JCT
    (docs/agents.md, "A bound on slowdown")."""
    if not protect or not len(est):
        return np.zeros(0, np.int64)
    q = state.queue
    est = np.where(np.isfinite(est), est, NO_LIMIT_SECONDS)
    slowed = (np.maximum(state.now - q.submit, 0.0) + est) / np.maximum(est, MIN_SCALE_SECONDS)
    rows = np.flatnonzero(slowed >= protect)
    return rows[np.lexsort((q.seq[rows], est[rows] / np.maximum(urgency[rows], 1e-9)))]


def check_fairness(fairness: float | str) -> float:
    """``fairness`` (a number, or its text in a policy name) as a float; ValueError unless
    0 <= fairness <= 1."""
    w = float(fairness)
    if not 0.0 <= w <= 1.0:  # also refuses nan
        raise ValueError(f"fairness must be between 0 and 1, got {fairness!r}")
    return w


@dataclass(frozen=True)
class Weights:
    """Weights of the cost's completion-time and communication terms (each dimensionless,
    see the module notes); the fairness setting W blends inside the first."""

    jct: float = 1.0
    comm: float = 1.0


@dataclass(frozen=True)
class Solution:
    """A point of the search space: ``order`` holds window positions (indices into
    `LookAhead.rows`), ``pack`` the placement gene of each window job (by position in the
    window, not in the order)."""

    order: tuple[int, ...]
    pack: tuple[bool, ...]
    cost: float


@dataclass(frozen=True)
class Schedule:
    """The modelled schedule of one solution, for tests and explanations (by window job)."""

    start: tuple[float, ...]
    slowdown: tuple[float, ...]
    nodes: tuple[int, ...]
    jct_term: float  # remaining completion time, unweighted (module notes)
    fairness_term: float  # the same, each job weighted by its user's fairness weight
    comm_term: float
    cost: float
    startable: int
    now: tuple[int, ...]  # window jobs the model starts now, in priority order


class SlowdownTable:
    """``slowdown(model, gpus split evenly over k nodes)`` per (model, gpus, k), cached:
    what a split start costs a job of that model. Unknown models use the profile with
    the median communication/compute ratio, as the feature encoder does.

    A split is priced as a busy cluster makes it: the k nodes under k different switches
    (as far as there are switches) and each node's share spread over its NVLink islands.
    A job splits only where no node holds it, so its GPUs are the fragments other jobs
    left, and on held-out Philly windows the placer's splits ran 1.2-3.2x longer than on
    one node. Priced at the best case (nodes under one switch, a whole island on each),
    the table said 1.04-1.72x (an 8-GPU job split 4 + 4: 1.05x, where it ran 1.42x), so
    the look-ahead split where waiting for one node paid. Priced so, the look-ahead family
    is 3-4% faster at every W on held-out Philly windows and 23-25% on a multi-GPU workload;
    at W = 1 the worst-off user waits 5-8% longer, no longer started on fragments
    (docs/results.md, "Splits priced as they land")."""

    def __init__(self, topology: Topology) -> None:
        self.topology = topology
        self.speed = SpeedModel(topology)
        items = sorted(self.speed.profiles.items(), key=lambda kv: (kv[1].grad_gbytes / kv[1].compute_s, kv[0]))
        self.default_model = items[len(items) // 2][0]
        self._cache: dict[tuple[str, int], tuple[float, ...]] = {}
        self._nodes = _one_per_switch(topology)
        self._gpus = [_across_islands(topology, n) for n in range(len(topology.nodes))]

    def row(self, model: str | None, gpus: int) -> tuple[float, ...]:
        """Index k (1..) = slowdown on k nodes; index 0 unused. Single-node starts count as
        1.0 (the model does not follow NVLink islands)."""
        name = model if model is not None and model in self.speed.profiles else self.default_model
        key = (name, gpus)
        row = self._cache.get(key)
        if row is None:
            out = [1.0, 1.0]
            for k in range(2, min(gpus, len(self._nodes)) + 1):
                base, extra = divmod(gpus, k)
                wants = [base + (x < extra) for x in range(k)]
                nodes = self._nodes[:k]
                if any(w > len(self._gpus[n]) for w, n in zip(wants, nodes)):
                    out.append(out[-1])
                    continue
                chosen = [g for w, n in zip(wants, nodes) for g in self._gpus[n][:w]]
                out.append(max(1.0, self.speed.slowdown(name, chosen)))
            row = self._cache[key] = tuple(out)
        return row


def _one_per_switch(topology: Topology) -> list[int]:
    """Node indices taking one node from each leaf switch in turn (largest nodes first
    within a switch): the first k are k nodes under as many switches as there are."""
    caps = np.diff(topology.node_first_gpu)
    by_switch: dict[int, list[int]] = {}
    for n in sorted(range(len(topology.nodes)), key=lambda n: (-caps[n], n)):
        by_switch.setdefault(int(topology.node_switch[n]), []).append(n)
    return _in_turn([by_switch[s] for s in sorted(by_switch)])


def _across_islands(topology: Topology, node: int) -> list[int]:
    """Node ``node``'s GPUs taking one from each NVLink island in turn."""
    return _in_turn([topology.island_gpus[i].tolist() for i in topology.node_islands[node]])


def _in_turn(groups: list[list[int]]) -> list[int]:
    """The first of each group, then the second of each, and so on."""
    return [g[i] for i in range(max(map(len, groups))) for g in groups if i < len(g)]


class LookAhead:
    """The window of one state, the model's inputs as plain Python lists (the evaluation is
    a Python loop; numpy's per-call cost would dominate it), and the cost function."""

    def __init__(
        self,
        state: ClusterState,
        size: int,
        weights: Weights,
        slowdowns: SlowdownTable,
        model: str = "backfill",
        pack_genes: bool = True,
        fairness: float = DEFAULT_FAIRNESS,
        protect: float = PROTECT_OFF,
    ) -> None:
        self.fairness = check_fairness(fairness)
        self.protect = check_protect(protect)
        if model not in ("backfill", "serial"):
            raise ValueError(f"unknown look-ahead model {model!r}: backfill or serial")
        self.model = model
        self.depth = DEPTH
        if size < 1:
            raise ValueError(f"window size must be at least 1, got {size}")
        self.state = state
        self.weights = weights
        topo = state.topology
        q = state.queue
        now = self.now = float(state.now)
        n_nodes = len(topo.nodes)
        self.capacity = [int(c) for c in np.diff(topo.node_first_gpu)]
        node_free = np.bincount(topo.gpu_node, weights=state.free, minlength=n_nodes).astype(np.int64)
        self.node_free = [int(x) for x in node_free]
        self.total_free = int(node_free.sum())

        # Running jobs give their GPUs back at their estimated end (never before now). Their
        # GPUs' nodes are looked up in one gather and counted in Python: a job holds a few
        # GPUs, and numpy calls per job were most of this constructor's cost.
        accuracy = {u: (s.limit_accuracy or 1.0) for u, s in state.users.items()}
        releases = []
        running = sorted(state.running, key=lambda r: r.job_id)
        held_on = topo.gpu_node[np.fromiter(chain.from_iterable(r.gpus for r in running), np.int64)]  # per held GPU
        node_up = node_free + np.bincount(held_on, minlength=n_nodes)  # per node: free + held
        node_of = held_on.tolist()
        at = 0
        for seq, r in enumerate(running):
            per_node: dict[int, int] = {}
            for n in node_of[at : at + len(r.gpus)]:
                per_node[n] = per_node.get(n, 0) + 1
            at += len(r.gpus)
            if r.time_limit is None:
                end = now + NO_LIMIT_SECONDS
            else:
                end = _expected_end(now, r.start_time, r.time_limit, accuracy.get(r.user, 1.0))
            releases.append((end, seq, tuple(sorted(per_node.items())), r.num_gpus))
        releases.sort()
        self.releases = releases
        self.max_node = max(int(x) for x in node_up) if n_nodes else 0
        self.gpus_up = max(1, int(node_up.sum()))

        # ---- the window ----
        est = estimated_runtimes(state) if len(q.gpus) else np.zeros(0)
        est = np.where(np.isfinite(est), est, NO_LIMIT_SECONDS)
        pending = state.pending
        shaped = {}
        eligible = q.gpus <= int(node_up.sum())
        fifo = q.arrival
        sjf = np.lexsort((q.seq, est))
        served = state.attained_service
        per_user = np.array([served.get(u, 0.0) for u in q.users], dtype=float)
        fair = np.lexsort((q.seq, per_user[q.user])) if len(q.users) else fifo
        # Fairness weight of each pending job (mean 1 over the queue) and its blend with
        # the JCT term's weight 1: ``urgency`` = (1 - W) + W * weight.
        fw = self.fairness
        job_weight = self._job_weights(state, est) if fw > 0 and len(q.gpus) else np.ones(len(q.gpus))
        urgency = (1.0 - fw) + fw * job_weight
        fit_size = size // 4 if size >= 4 else 0
        main_size = size - fit_size
        chosen: list[int] = []
        seen: set[int] = set()

        ever: tuple[np.ndarray, Fit] | None = None  # the cluster once every running job ends

        def ok(r: int) -> bool:
            nonlocal ever
            if not eligible[r]:
                return False
            job = pending[r]
            if job.num_nodes is not None:
                per = job.num_gpus // job.num_nodes
                if int((node_up >= per).sum()) < job.num_nodes:
                    return False
                shaped[r] = (per, job.num_nodes)
            if job.placement_constrained or (state.nodes is not None and (job.asks_resources or state.nodes.confines(job))):
                # a job Slurm can never place (its GPU type, -w, CPUs...) is no candidate:
                # planned to start now, it would be the only job let start, and start never
                if ever is None:
                    ever = when_all_end(state)
                up, fit = ever
                if int(np.count_nonzero(fit.usable(job, up))) < job.num_gpus:
                    return False
            return True

        guarded = protected_first(state, est, urgency, self.protect)
        orders = [fifo, sjf, fair]
        if len(guarded):
            orders.append(guarded)  # the protected jobs enter the window
        if fw > 0:
            # The blended cost's own order (Smith's rule: estimate / urgency, ascending),
            # so the jobs of the worst-off users are candidates even when they are neither
            # old, short nor of a least-served user.
            orders.append(np.lexsort((q.seq, est / np.maximum(urgency, 1e-9))))
        heads = [s[: main_size].tolist() for s in orders]
        for k in range(main_size):
            for h in heads:
                if k < len(h) and len(chosen) < main_size:
                    r = h[k]
                    if r not in seen:
                        seen.add(r)
                        if ok(r):
                            chosen.append(r)
        if fit_size:
            fits = sjf[q.gpus[sjf] <= self.total_free]
            extra = 0
            for r in fits.tolist():
                if extra >= fit_size:
                    break
                if r not in seen:
                    seen.add(r)
                    if ok(r):
                        chosen.append(r)
                        extra += 1
        self.rows = chosen
        n = self.size = len(chosen)
        self.gpus = [int(q.gpus[r]) for r in chosen]
        self.est = [float(est[r]) for r in chosen]
        self.shape = [shaped.get(r) for r in chosen]
        self.slowdowns = [slowdowns.row(pending[r].model, g) for r, g in zip(chosen, self.gpus)]
        # Fewest nodes a job can pack onto (what the pack gene waits for).
        self.min_nodes = [
            s[1] if s is not None else max(1, math.ceil(g / max(1, self.max_node))) for s, g in zip(self.shape, self.gpus)
        ]
        # The gene matters only for jobs that could start spread over more nodes than that.
        self.flexible = [i for i in range(n) if self.shape[i] is None and self.gpus[i] > 1] if pack_genes else []
        self.scale = max(MIN_SCALE_SECONDS, sum(self.est) / n) if n else MIN_SCALE_SECONDS
        self.gpu_time = sum(e * g for e, g in zip(self.est, self.gpus)) or 1.0

        # Fairness weights of the window's jobs, normalised to mean 1 over the window.
        wj = [float(job_weight[r]) for r in chosen]
        mean_w = sum(wj) / n if n else 1.0
        self.fair_weight = [x / mean_w for x in wj] if mean_w > 0 else [1.0] * n
        self.urgency = [(1.0 - fw) + fw * x for x in self.fair_weight]
        self._fifo = fifo
        # The window's protected jobs in `protected_first`'s order: every solution's order
        # starts with them (`ordered`), so the list schedule reserves for the first that
        # does not fit and only backfill that does not delay it starts before it.
        where = {r: i for i, r in enumerate(chosen)}
        self.protected = tuple(where[r] for r in guarded.tolist() if r in where)
        self._protected_set = frozenset(self.protected)

    def ordered(self, order: Sequence[int]) -> Sequence[int]:
        """``order`` as the model plays it: the protected jobs first (`protect`), then the
        others in ``order``'s order."""
        if not self.protected:
            return order
        skip = self._protected_set
        return self.protected + tuple(i for i in order if i not in skip)

    # ---- solutions ----

    def evaluate(self, order: Sequence[int], pack: Sequence[bool]) -> float:
        return self._run(order, pack, None)

    def schedule(self, order: Sequence[int], pack: Sequence[bool]) -> Schedule:
        rec: dict = {}
        cost = self._run(order, pack, rec)
        return Schedule(
            start=tuple(rec["start"]), slowdown=tuple(rec["slowdown"]), nodes=tuple(rec["nodes"]),
            jct_term=rec["jct"], fairness_term=rec["fair"], comm_term=rec["comm"], cost=cost,
            startable=rec["startable"], now=tuple(rec["now"]),
        )

    def cost_at(self, start: Sequence[float], slowdown: Sequence[float]) -> float:
        """The cost of window jobs starting at ``start`` and running ``slowdown`` x their
        estimate (by window job): the terms `evaluate` adds up, for tests and explanations."""
        now = self.now
        done = [s - now + k * e for s, k, e in zip(start, slowdown, self.est)]
        comm = sum((k - 1.0) * e * g for k, e, g in zip(slowdown, self.est, self.gpus))
        return self._cost(sum(done), sum(f * c for f, c in zip(self.fair_weight, done)), comm, self.size, None)

    def _run(self, order: Sequence[int], pack: Sequence[bool], rec: dict | None) -> float:
        order = self.ordered(order)
        if self.model == "backfill":
            return self._run_backfill(order, pack, rec)
        return self._run_serial(order, pack, rec)

    def _cost(self, jct: float, fj: float, comm: float, n: int, rec: dict | None) -> float:
        w = self.weights
        fw = self.fairness
        jct_term = jct / (n * self.scale) if n else 0.0
        fair_term = fj / (n * self.scale) if n else 0.0
        comm_term = comm / self.gpu_time
        if rec is not None:
            rec.update(jct=jct_term, fair=fair_term, comm=comm_term)
        return w.jct * ((1.0 - fw) * jct_term + fw * fair_term) + w.comm * comm_term

    def _job_weights(self, state: ClusterState, est: np.ndarray) -> np.ndarray:
        """`fairness_weights` with each pending job's time until enough GPUs come back for
        it, by count, at the running jobs' estimated ends."""
        q = state.queue
        ahead = np.zeros(len(q.gpus))
        if self.releases:
            ends = np.array([r[0] for r in self.releases])
            back = self.total_free + np.cumsum([r[3] for r in self.releases])
            k = np.minimum(np.searchsorted(back, q.gpus, side="left"), len(ends) - 1)
            ahead = np.where(q.gpus <= self.total_free, 0.0, ends[k] - self.now)
        return fairness_weights(state, ahead, est)

    def _run_backfill(self, order: Sequence[int], pack: Sequence[bool], rec: dict | None) -> float:
        """List schedule with EASY backfill, event by event: at each release, start every
        job that fits in priority order; the first job that does not fit gets a shadow
        time (when enough GPUs are back, by count), and a later job may start before it
        only if it ends by then or uses GPUs spare at that time."""
        now = self.now
        nf = self.node_free[:]
        total = self.total_free
        rel = self.releases[:]  # sorted by end
        p = 0
        insort = bisect.insort
        gpus, est, sd, shape, min_nodes = self.gpus, self.est, self.slowdowns, self.shape, self.min_nodes
        fwt = self.fair_weight
        n_nodes = len(nf)
        seq = len(rel)
        jct = fj = comm = 0.0
        now_jobs: list[int] = []
        if rec is not None:
            starts = [0.0] * self.size
            slow = [1.0] * self.size
            used = [0] * self.size
        remaining = list(order)
        min_g = min((gpus[i] for i in remaining), default=0)
        relaxed = False
        t = now
        scans = 0
        depth = self.depth
        while remaining:
            while p < len(rel) and rel[p][0] <= t:
                for node, k in rel[p][2]:
                    nf[node] += k
                total += rel[p][3]
                p += 1
            if total < min_g and p < len(rel):
                t = rel[p][0]
                continue
            if scans >= depth:
                # Beyond the look-ahead depth, a fluid tail: the remaining jobs start in
                # priority order once the GPU-seconds still running and ahead of them
                # have drained through the cluster's GPUs.
                gpus_up = self.gpus_up
                ahead = sum(r[3] * (r[0] - t) for r in rel[p:])
                for i in remaining:
                    start = t + ahead / gpus_up
                    run = est[i]
                    ahead += gpus[i] * run
                    jct += start - now + run
                    fj += fwt[i] * (start - now + run)
                    if rec is not None:
                        starts[i] = start
                remaining = []
                break
            scans += 1
            kept = []
            shadow = None
            spare = 0
            top = max(nf)
            for i in remaining:
                g = gpus[i]
                if g > total or (shadow is not None and g > spare and t + est[i] > shadow) or (pack[i] and g > top and g <= self.max_node):
                    alloc = None
                else:
                    alloc = _fit(g, shape[i], pack[i], min_nodes[i], nf, n_nodes)
                if alloc is not None:
                    row = sd[i]
                    k = len(alloc)
                    s = row[k] if k < len(row) else row[-1]
                    run = est[i] * s
                    if shadow is not None and t + run > shadow:
                        if g <= spare:
                            spare -= g
                        else:
                            alloc = None
                if alloc is None:
                    if shadow is None:
                        need = g - total
                        shadow, spare = math.inf, 0
                        if need <= 0:  # enough GPUs, wrong shape: until the next release
                            if p < len(rel):
                                shadow = rel[p][0]
                        else:
                            acc = 0
                            for q in range(p, len(rel)):
                                acc += rel[q][3]
                                if acc >= need:
                                    shadow, spare = rel[q][0], acc - need
                                    break
                    kept.append(i)
                    continue
                for node, c in alloc:
                    nf[node] -= c
                total -= g
                insort(rel, (t + run, seq, alloc, g), p)
                seq += 1
                jct += t - now + run
                fj += fwt[i] * (t - now + run)
                comm += (s - 1.0) * est[i] * g
                if t == now:
                    now_jobs.append(i)
                if rec is not None:
                    starts[i], slow[i], used[i] = t, s, k
            remaining = kept
            if not remaining:
                break
            min_g = min(gpus[i] for i in remaining)
            if p >= len(rel):
                # Nothing left to come back and the rest cannot fit (only when the pack gene
                # cannot be met): start them spread, in order, as GPUs allow.
                if relaxed or all(gpus[i] > total for i in remaining):
                    jct += NO_LIMIT_SECONDS * len(remaining)  # never starts in the model
                    fj += NO_LIMIT_SECONDS * sum(fwt[i] for i in remaining)
                    break
                relaxed, pack = True, (False,) * len(pack)
                continue
            t = rel[p][0]
        cost = self._cost(jct, fj, comm, len(order), rec)
        if rec is not None:
            rec.update(start=starts, slowdown=slow, nodes=used, now=now_jobs, startable=len(now_jobs))
        return cost

    def _run_serial(self, order: Sequence[int], pack: Sequence[bool], rec: dict | None) -> float:
        now = self.now
        nf = self.node_free[:]
        total = self.total_free
        heap = self.releases[:]  # sorted, hence a heap
        pop, push = heapq.heappop, heapq.heappush
        gpus, est, sd, shape, min_nodes = self.gpus, self.est, self.slowdowns, self.shape, self.min_nodes
        fwt = self.fair_weight
        n_nodes = len(nf)
        seq = len(heap)
        t = now
        jct = fj = comm = 0.0
        startable = -1
        if rec is not None:
            starts = [0.0] * self.size
            slow = [1.0] * self.size
            used = [0] * self.size
        for pos, i in enumerate(order):
            g = gpus[i]
            alloc = None
            while True:
                while heap and heap[0][0] <= t:
                    _, _, back, c = pop(heap)
                    for node, k in back:
                        nf[node] += k
                    total += c
                if total >= g:
                    alloc = _fit(g, shape[i], pack[i], min_nodes[i], nf, n_nodes)
                    if alloc is not None:
                        break
                if not heap:
                    if total >= g:  # the pack gene cannot be met any more: spread
                        alloc = _fit(g, shape[i], False, min_nodes[i], nf, n_nodes)
                    break
                t = heap[0][0]
            if alloc is None:  # cannot happen for window jobs (they fit an empty cluster)
                alloc = ()
            k = len(alloc)
            s = sd[i][k] if k < len(sd[i]) else sd[i][-1]
            run = est[i] * s
            if t > now and startable < 0:
                startable = pos
            for node, c in alloc:
                nf[node] -= c
            total -= g
            push(heap, (t + run, seq, alloc, g))
            seq += 1
            jct += t - now + run
            fj += fwt[i] * (t - now + run)
            comm += (s - 1.0) * est[i] * g
            if rec is not None:
                starts[i], slow[i], used[i] = t, s, k
        if startable < 0:
            startable = len(order)
        cost = self._cost(jct, fj, comm, len(order), rec)
        if rec is not None:
            rec.update(start=starts, slowdown=slow, nodes=used, startable=startable, now=list(order[:startable]))
        return cost

    def startable(self, order: Sequence[int], pack: Sequence[bool]) -> int:
        """How many jobs at the head of ``order`` the model starts now."""
        return self.schedule(order, pack).startable

    def full_order(self, order: Sequence[int]) -> np.ndarray:
        """Pending-queue indices: the window in ``order``, then every other job by arrival."""
        head = np.array([self.rows[i] for i in order], dtype=np.int64)
        rest = np.ones(len(self._fifo), dtype=bool)
        rest[head] = False
        return np.concatenate([head, self._fifo[rest[self._fifo]]])

    # ---- starting points ----

    def seeds(self, extra: Sequence[tuple[int, ...]] = ()) -> list[tuple[tuple[int, ...], tuple[bool, ...]]]:
        """Starting solutions: FIFO, shortest estimate first, fit-now-first, the window's
        own interleaved order, with fairness W > 0 estimate / urgency ascending (Smith's
        rule for the blended cost), then the ``extra`` orders (window positions) a chooser
        proposes; each with no job packed and with every flexible job packed, without
        repeats (evaluated by the caller)."""
        n = self.size
        state = self.state
        q = state.queue
        rows = self.rows
        seq = [int(q.seq[r]) for r in rows]
        by_arrival = tuple(sorted(range(n), key=lambda i: seq[i]))
        shortest = tuple(sorted(range(n), key=lambda i: (self.est[i], seq[i])))
        fit_now = tuple(sorted(range(n), key=lambda i: (self.gpus[i] > self.total_free, self.est[i] * self.gpus[i], seq[i])))
        mixed = tuple(range(n))
        orders = [by_arrival, shortest, fit_now, mixed]
        if self.fairness > 0:
            u = self.urgency
            orders.append(tuple(sorted(range(n), key=lambda i: (self.est[i] / u[i], seq[i]))))
        orders.extend(extra)
        spread = (False,) * n
        packed = tuple(i in set(self.flexible) for i in range(n))
        out = []
        for order in orders:
            for p in (spread, packed) if self.flexible else (spread,):
                if (order, p) not in out:
                    out.append((order, p))
        return out



def fairness_weights(state: ClusterState, ahead: np.ndarray, est: np.ndarray, slowdown: bool = True) -> np.ndarray:
    """Each pending job's fairness weight, from how badly off its user is: by projected
    mean wait (finished and running jobs at their waits, pending jobs at their wait so far
    plus ``ahead``, per pending job the time until it could start), and by that wait
    against the run time of the jobs they are waiting for (``est``, per pending job its
    estimated run time). A user's weight is ``r ** FAIRNESS_POWER * (c / c_u) **
    COUNT_EXPONENT``, where ``r`` is the larger of two ratios to the users' mean: the
    projected mean wait (floored at a minute), and the projected slowdown ``1 + mean wait
    / mean estimate of their pending jobs`` (estimates floored at a minute; the mean over
    the users with jobs pending, so a replay, whose queue lists every user of the
    workload, weighs as the daemon, whose queue lists only those); ``c_u`` is
    the user's job count and ``c`` the users' mean count (a job moves the mean wait of a
    user with few jobs more). Normalised to mean 1 over the queue. The look-ahead weighs
    completion times with it; the attentive job agent reads its logarithm
    (`attentived.agents.features`).

    Why both: by wait alone, a user of minute-long jobs who waits half an hour for each
    looked well served next to users waiting hours for day-long jobs, and a look-ahead
    minimising completion time kept starting others' one-GPU jobs ahead of their two-GPU
    ones (a 42-second job waited 5.5 hours on a held-out window). Taking the larger ratio
    cut the worst user's mean wait of `portfolio` at the default W from 8.67 to 8.02 h and
    raised its Jain index over users' slowdowns from 0.411 to 0.432 at 1% less average JCT
    (16 held-out windows x 2 seeds; docs/agents.md).

    ``slowdown=False`` is the wait ratio alone: the urgency that attentive models trained
    before the change read (`NetConfig.slowdown_urgency`), so they see what they were
    trained on."""
    q = state.queue
    done = state.waits_by_user
    queued = set(q.users)
    names = list(q.users) + [u for u in done if u not in queued]
    wait_sum = np.array([done.get(u, (0.0, 0))[0] for u in names])
    count = np.array([float(done.get(u, (0.0, 0))[1]) for u in names])
    nu = len(q.users)
    projected = np.maximum(state.now - q.submit, 0.0) + ahead
    queued_jobs = np.bincount(q.user, minlength=nu)  # 0 for a user of the queue's table with none pending
    wait_sum[:nu] += np.bincount(q.user, weights=projected, minlength=nu)
    count[:nu] += queued_jobs
    active = count > 0
    mean = np.where(active, wait_sum / np.maximum(count, 1.0), 0.0) + MIN_SCALE_SECONDS
    ratio = mean / mean[active].mean()
    if slowdown:
        runs = np.where(np.isfinite(est), est, NO_LIMIT_SECONDS)
        run = np.bincount(q.user, weights=runs, minlength=nu) / np.maximum(queued_jobs, 1)
        slow = 1.0 + mean[:nu] / np.maximum(run, MIN_SCALE_SECONDS)
        waiting = queued_jobs > 0  # a replay's table lists every user of the workload, the daemon's only those pending
        ratio[:nu][waiting] = np.maximum(ratio[:nu][waiting], slow[waiting] / slow[waiting].mean())
    weight = ratio**FAIRNESS_POWER * (count[active].mean() / np.maximum(count, 1.0)) ** COUNT_EXPONENT
    job = weight[:nu][q.user]
    return job / job.mean()


def _expected_end(now: float, start: float, limit: float, accuracy: float) -> float:
    """When a running job is expected to end: at its estimate (limit x the user's accuracy)
    while it has not reached it; once past it, halfway between now and the limit (Slurm
    ends it there), not "now": an overdue job is evidence of a long one."""
    estimate = start + limit * accuracy
    if estimate > now:
        return estimate
    return max(now, 0.5 * (now + start + limit))


def _fit(g: int, shape: tuple[int, int] | None, pack: bool, min_nodes: int, nf: list[int], n_nodes: int):
    """Per-node GPU counts for a job of ``g`` GPUs on free counts ``nf``, or ``None``."""
    if shape is not None:
        per, k = shape
        cands = sorted((f, n) for n, f in enumerate(nf) if f >= per)
        if len(cands) < k:
            return None
        return tuple((n, per) for _, n in cands[:k])
    best, best_free = -1, 1 << 30
    for n in range(n_nodes):
        f = nf[n]
        if g <= f < best_free:
            best, best_free = n, f
            if f == g:
                break
    if best >= 0:
        return ((best, g),)
    # Across nodes: the fullest nodes first (fewest nodes touched).
    want = g
    alloc = []
    for n in sorted(range(n_nodes), key=nf.__getitem__, reverse=True):
        f = nf[n]
        if f <= 0:
            break
        take = f if f < want else want
        alloc.append((n, take))
        want -= take
        if want == 0:
            break
    if want:
        return None
    if pack and len(alloc) > min_nodes:
        return None
    return tuple(alloc)
