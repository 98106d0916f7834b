"""Start only packed placements: any policy, wrapped (``POLICY:pack=1``).

The wrapped policy's order is walked by EASY backfill with one condition more: a job
starts only on a placement as packed as on an empty cluster (no more NVLink islands and
nodes than its size needs, `attentived.agents.placement.packed`). The first job in the
order that cannot start packed is held where and when it will (running jobs released by
their time limits), and behind it a job starts only packed off the held GPUs, or when its
time limit ends before the hold. A job that cannot pack even on the whole cluster as it
is up (its ``-w``, ``-x``, type or features, nodes down) starts where it fits. A job that
fixed its node count is packed on that many nodes with the fewest islands on each.

Why: the shipped attentive model is fast because of the rule it follows behind its WAIT
(`attentived.agents.behind_wait`), not because of its order: SJF with the same rule and
no network ran held-out Philly windows in 4.91 h avg JCT against the model's 4.97 h and
SJF's own 5.96 h (docs/agents.md, "Ten seeds, and the model that ships"). So every policy
gets the rule as a knob, and a comparison can tell the order from the packing. What it
costs: GPUs stay idle while only spread placements are free, and the queue behind a
held job waits for packed room; the worst-off user's wait grows (docs/results.md).
"""

from __future__ import annotations

from itertools import chain
from typing import Any

import numpy as np

from .fit import Fit, when_all_end
from .placement import Consolidate, on_fullest_nodes, packed
from .plan import Plan
from .policy import Ranking, Scheduler, releases_short_of
from .state import ClusterState, PendingJob, RunningJob, free_counts

PLACER = Consolidate()


class Pack:
    """``inner``'s order started by the packing rule (see the module docstring). The
    order is the inner policy's job chooser's when it has one (heuristics, the
    look-aheads, Slurm's presets, `proximity-drl`), else the order of its plan (the job
    agents, whose WAITs the rule replaces). A chooser that starts only the head of its
    order (the look-aheads' `Ranking.startable`) keeps that limit: what it leaves pending
    on purpose stays pending. Every policy's placer is replaced by `PackedPlacer`:
    `proximity-drl:pack=1` is `fifo:pack=1`."""

    def __init__(self, inner: Any, name: str) -> None:
        self.inner = inner
        self.name = name
        chooser = getattr(inner, "chooser", None)
        self._loop = Scheduler(chooser if chooser is not None else PlanOrder(inner), PackedPlacer(), backfill=True,
                               name=name)
        self.chooser, self.placer = self._loop.chooser, self._loop.placer  # not the inner's (`unsupported`)

    def __getattr__(self, attr: str) -> Any:
        # needs_oracle, next_change, explain, the daemon's warm-up: the inner policy's own
        return getattr(self.inner, attr)

    def decide(self, state: ClusterState) -> Plan:
        return self._loop.decide(state)


class PlanOrder:
    """A job chooser that ranks the queue in the order of ``policy``'s plan."""

    def __init__(self, policy: Any) -> None:
        self.policy = policy
        self.name = policy.name

    @property
    def needs_oracle(self) -> bool:
        return bool(self.policy.needs_oracle)

    def rank(self, state: ClusterState) -> Ranking:
        at = {job.job_id: i for i, job in enumerate(state.pending)}
        order = [at[j] for j in self.policy.decide(state).order if j in at]
        if len(order) < len(at):  # a plan lists every pending job; keep any it left out last
            listed = set(order)
            order += [i for i in range(len(state.pending)) if i not in listed]
        return Ranking(np.asarray(order, dtype=np.int64))


class PackedPlacer:
    """A packed placement (`packed_place`) when there is one; else ``None`` when the job
    will pack once running jobs end (it waits for that), Consolidate's when it never will.

    The search is Consolidate's placement and the fullest nodes', not every GPU set: a
    packed set that neither finds (a 12-GPU job on a whole node plus a lone whole island
    while another node offers two half islands) is missed and the job waits. On 8 held-out
    Philly windows (16 x 8 GPUs, `sjf+consolidate:pack=1`) that happened at none of 24,338
    placements: Philly's 1, 2, 4 and 8-GPU jobs fit islands and nodes whole."""

    name = "packed"

    def __init__(self) -> None:
        self._state: ClusterState | None = None  # the snapshot ``_can_pack`` was worked out on
        self._can_pack: dict[str, bool] = {}
        self._up: tuple[np.ndarray, Fit] | None = None

    def place(self, job: PendingJob, free: np.ndarray, state: ClusterState) -> tuple[int, ...] | None:
        if not _room_to_pack(job, free, state):
            return None if self.can_pack(job, state) else PLACER.place(job, free, state)
        gpus = PLACER.place(job, free, state)
        best = _packed_of(job, gpus, free, state)
        return best if best is not None or self.can_pack(job, state) else gpus

    def releases_short_of(self, job: PendingJob, future: np.ndarray, runs: tuple[RunningJob, ...],
                          state: ClusterState) -> int:
        """How many of ``runs`` (in release order) can end with still no room to pack
        ``job`` among ``future`` and their GPUs (`expected_hold` skips them): a binary
        search, since room only grows as jobs end. Up to the first exclusive job only
        (it gives back whole nodes), as `releases_short_of` of a count."""
        lo = releases_short_of(job.num_gpus - int(np.count_nonzero(future)), runs)
        if not self.can_pack(job, state):  # it starts where it fits: only the count is short
            return lo
        hi = next((k for k in range(lo, len(runs)) if runs[k].exclusive), len(runs))
        if lo >= hi:
            return lo
        ends = np.cumsum([len(r.gpus) for r in runs[lo:hi]])
        back = np.fromiter(chain.from_iterable(r.gpus for r in runs[lo:hi]), np.int64, int(ends[-1]))
        base = future.copy()
        base[np.fromiter(chain.from_iterable(r.gpus for r in runs[:lo]), np.int64)] = True
        first = lo

        def room(k: int) -> bool:  # with runs[:k] ended, k > first
            mask = base.copy()
            mask[back[: ends[k - first - 1]]] = True
            return _room_to_pack(job, mask, state)

        while lo < hi:  # the most releases short: room(lo) is False (or lo is where it started)
            mid = (lo + hi + 1) // 2
            if room(mid):
                hi = mid - 1
            else:
                lo = mid
        return lo

    def can_pack(self, job: PendingJob, state: ClusterState) -> bool:
        """Whether ``job`` gets a packed placement once every running job has ended (its
        GPUs, CPUs and memory back): one answer per job and snapshot."""
        if self._state is not state:
            self._state, self._can_pack, self._up = state, {}, None
        known = self._can_pack.get(job.job_id)
        if known is None:
            up, fit = self._released(state)
            known = self._can_pack[job.job_id] = packed_place(job, fit.usable(job, up), state) is not None
        return known

    def _released(self, state: ClusterState) -> tuple[np.ndarray, Fit]:
        """The GPUs that are up (free or running a job) and the account once every running
        job has ended: each node's CPUs and memory as it has them, less what holds no GPU."""
        if self._up is None:
            self._up = when_all_end(state)
        return self._up


def packed_place(job: PendingJob, free: np.ndarray, state: ClusterState) -> tuple[int, ...] | None:
    """A placement of ``job`` among ``free`` as packed as on an empty cluster, or ``None``:
    Consolidate's, or when it kept one switch at the cost of more nodes, the fullest nodes'."""
    if not _room_to_pack(job, free, state):
        return None
    return _packed_of(job, PLACER.place(job, free, state), free, state)


def _packed_of(job: PendingJob, gpus: tuple[int, ...] | None, free: np.ndarray,
               state: ClusterState) -> tuple[int, ...] | None:
    """``gpus`` (Consolidate's placement of ``job`` among ``free``) when packed, else the
    fullest nodes' when those are, else ``None``."""
    if gpus is None or packed(state.topology, gpus, job.num_nodes):
        return gpus
    if job.num_nodes is None:
        fewest = on_fullest_nodes(state, free, job.num_gpus, state.topology.least_spread(job.num_gpus)[1])
        if fewest is not None and packed(state.topology, fewest):
            return fewest
    return None


def _room_to_pack(job: PendingJob, free: np.ndarray, state: ClusterState) -> bool:
    """False when no packed placement of ``job`` exists among ``free``: its fewest islands
    (nodes) cannot hold its GPUs even where most are free. Two bincounts instead of a
    placement: a hold walks thousands of releases at 16,384 GPUs, most of them short."""
    if job.num_nodes is not None:
        return True
    topo = state.topology
    island_free, node_free = state.free_counts if free is state.free else free_counts(topo, free)
    islands, nodes, _ = topo.least_spread(job.num_gpus)
    return _most(island_free, islands) >= job.num_gpus and _most(node_free, nodes) >= job.num_gpus


def _most(counts: np.ndarray, k: int) -> int:
    """The sum of the ``k`` largest of ``counts``."""
    if k == 1:
        return int(counts.max())
    return int(-np.partition(-counts, k - 1)[:k].sum()) if k < len(counts) else int(counts.sum())
