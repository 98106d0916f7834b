"""What Slurm checks before it starts a job besides free GPUs, as the GPUs the job may use.

A plan that counts only GPUs puts jobs where slurmctld refuses them: four ``-c 6`` one-GPU
jobs stacked on a node with one free CPU, an ``--exclusive`` job on a busy node, while
other nodes idle. `Fit` is one plan's account of what each node has left. `Fit.usable`
narrows the free GPUs to those a job may take now, cut so that *any* placement among them
is one Slurm accepts; placers and agents then choose as they always do. `Fit.take` books a
start, `Fit.release` gives a running job's share back (holds look ahead to running jobs'
ends).

The model is `PendingJob`'s, the one the simulator checks every start by: a job's ``cpus``
spread over its nodes in proportion to its GPUs there, rounded up, so on a node where it
takes ``k`` of its ``g`` GPUs it needs ``ceil(cpus * k / g)`` CPUs and ``mem_per_node`` MB
(or ``mem_per_cpu`` MB per CPU, or ``mem_per_gpu`` MB per GPU: `PendingJob.mem_on`); an
exclusive job needs nodes where nothing runs and holds them whole, their other GPUs too;
each node must have the job's GPU type and all its features, be in one of its partitions and not in its ``-x`` list. A ``-w`` list must be
covered whole (Slurm puts the job on every node it names), so the job runs on exactly those
nodes: one of them, or, for several, an exact set of GPUs touching each (a job that would
need nodes beyond its list is left to Slurm). Under Slurm's block topology a job's nodes
must lie where its size says (`topology.blocks`): the GPUs are cut to one such region. Without node capacity (``ClusterState.nodes``
is ``None``) only ``-w``, ``-x`` and ``--exclusive`` (whole free nodes) can be honoured, and
a job asking none of them costs nothing: `Fit.usable` returns the free mask itself, the
simulator's fast path.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import replace

import numpy as np

from attentived.topology import Topology
from attentived.topology.blocks import Blocks

from .state import ClusterState, NodeCapacity, PendingJob, RunningJob


class Fit:
    """One plan's account of the nodes' CPUs and memory, and the GPUs each job may use.

    Built from a snapshot (`Fit.of`, which copies the capacity arrays), then changed only
    by `take` and `release`, so a plan can book its starts and a hold can look ahead on a
    `copy` without touching the snapshot."""

    __slots__ = ("topology", "cpus", "mem", "idle", "_capacity", "_occupied")

    def __init__(self, topology: Topology, nodes: NodeCapacity | None = None, free: np.ndarray | None = None) -> None:
        """``free``: the snapshot's free GPUs, to tell a node that runs no GPU job but is
        busy all the same (CPU jobs: it stays unfit for ``--exclusive``); without it every
        node that is not idle counts as such."""
        self.topology = topology
        self._capacity = nodes
        self.cpus: np.ndarray | None = None  # free CPUs per node
        self.mem: np.ndarray | None = None  # free MB per node
        self.idle: np.ndarray | None = None  # nothing allocated (not even by this plan)
        self._occupied: np.ndarray | None = None  # busy although no GPU of it is
        if nodes is None:
            return
        n = len(topology.nodes)
        if len(nodes.cpus) != n or len(nodes.mem) != n or len(nodes.idle) != n:
            raise ValueError(f"node capacity describes {len(nodes.cpus)} nodes, the cluster has {n}")
        self.cpus = np.array(nodes.cpus, dtype=np.int64)
        self.mem = np.array(nodes.mem, dtype=np.int64)
        self.idle = np.array(nodes.idle, dtype=bool)
        all_free = np.ones(n, bool) if free is None else topology.per_node(free) == _sizes(topology)
        self._occupied = ~self.idle & all_free

    @classmethod
    def of(cls, state: ClusterState) -> Fit:
        return cls(state.topology, state.nodes, state.free)

    def copy(self) -> Fit:
        """An account that books apart from this one (without capacity nothing changes:
        this one)."""
        if self.cpus is None:
            return self
        assert self.mem is not None and self.idle is not None
        out = Fit(self.topology)
        out._capacity, out._occupied = self._capacity, self._occupied
        out.cpus, out.mem, out.idle = self.cpus.copy(), self.mem.copy(), self.idle.copy()
        return out

    def capacity(self) -> NodeCapacity | None:
        """What is left now, as a snapshot's ``nodes`` (``None`` when nothing is known)."""
        if self._capacity is None:
            return None
        assert self.cpus is not None and self.mem is not None and self.idle is not None
        return replace(self._capacity, cpus=self.cpus.copy(), mem=self.mem.copy(), idle=self.idle.copy())

    # ---- the GPUs a job may use ----

    def usable(self, job: PendingJob, free: np.ndarray) -> np.ndarray:
        """The GPUs of ``free`` that ``job`` may use now: ``free`` itself when nothing but
        GPUs limits it, else a new mask in which every placement of the job (node shape
        included) passes Slurm's checks. A node keeps only as many GPUs as the job's CPU
        and memory share there allows, its fullest NVLink islands' first."""
        sized = self.cpus is not None and job.asks_resources
        topo = self.topology
        if not (sized or job.placement_constrained or topo.blocks is not None
                or (self._capacity is not None and self._capacity.confines(job))):
            return free
        node_free = topo.per_node(free)
        room = np.where(self._static(job), node_free, 0)  # GPUs the job may take on each node
        if job.exclusive:
            whole = node_free == _sizes(topo)
            if self._occupied is not None:
                whole &= ~self._occupied
            room[~whole] = 0
        if sized:  # a node that could take the whole job keeps every free GPU for the placer
            limit = self._share_limit(job)
            room = np.where(limit >= job.num_gpus, room, np.minimum(room, limit))
        listed = self._listed(job)
        if topo.blocks is not None:
            room = self._block_room(job, room, listed)
        if job.num_nodes is not None:
            per = job.num_gpus // job.num_nodes
            if listed is not None and (len(listed) != job.num_nodes or (room[listed] < per).any()):
                return np.zeros_like(free)
            return free & (room >= per)[topo.gpu_node]
        if listed is not None and len(listed) > 1:
            room = _cover(room, listed, job.num_gpus)
        return _fullest_first(topo, free, room)

    def block_room(self, job: PendingJob, room: np.ndarray) -> np.ndarray:
        """``room`` (GPUs per node ``job`` may take, at some time) kept to where Slurm's block
        topology lets it run (`_block_room`); ``room`` itself on a cluster without blocks.
        For plans that count GPUs per node over time, as the backfill model's reservations."""
        if self.topology.blocks is None:
            return room
        return self._block_room(job, room, self._listed(job))

    def _block_room(self, job: PendingJob, room: np.ndarray, listed: np.ndarray | None) -> np.ndarray:
        """``room`` (the GPUs ``job`` may take on each node) under Slurm's block topology:
        kept only inside the part of one block where every placement of the job passes
        (`Blocks.region`); a ``-w`` list only where slurmctld accepts the list itself.

        A job that fixed no node count may take more nodes than it must, and a job of more
        nodes may span a larger block: where the fewest nodes it can take fit in no block,
        a larger block is tried with each node's room capped so that any placement there
        takes enough nodes for that block's level. So whether the job fits only grows as
        GPUs free up (holds bisect the releases, `policy.expected_hold`).

        A job none of whose candidate nodes (its partitions', with its GPU type and
        features) is in a block is placed as without blocks, as slurmctld evaluates blocks
        only for a job whose candidate nodes include some (`topology_p_eval_nodes`; ``-x``
        is left out: it holds the daemon's own avoidances)."""
        topo = self.topology
        blocks = topo.blocks
        assert blocks is not None
        inside = topo.node_block >= 0
        if job.exclude or job.nodelist:
            job = replace(job, exclude=(), nodelist=())
        if not (self._static(job) & inside).any():
            return room
        if listed is not None:
            return room if blocks.allows(topo.node_block, listed) else np.zeros_like(room)
        g = job.num_gpus
        if job.num_nodes is not None:
            per = g // job.num_nodes
            region = blocks.region(topo.node_block, (room >= per).astype(np.int64), job.num_nodes, job.num_nodes)
            return np.where(region, room, 0)
        widest = int(_sizes(topo)[inside].max())
        first = None  # the fewest nodes' sizing, which comes first: where the job does not fit now
        for nodes, cap in _block_sizings(blocks, g, -(-g // widest)):
            capped = room if cap is None else np.minimum(room, cap)
            region = blocks.region(topo.node_block, capped, g, nodes)
            kept = np.where(region, capped, 0)
            if int(kept.sum()) >= g:
                return kept
            first = kept if first is None else first
        assert first is not None
        return first

    def _share_limit(self, job: PendingJob) -> np.ndarray:
        """Per node, the most GPUs of ``job`` whose CPU and memory share fit what is left."""
        assert self.cpus is not None and self.mem is not None
        g = job.num_gpus
        limit = np.full(len(self.cpus), g, dtype=np.int64)
        if job.cpus:
            # ceil(cpus * k / g) <= free  <=>  k <= free * g / cpus
            limit = np.minimum(limit, self.cpus * g // job.cpus)
        if job.mem_per_node:
            limit[self.mem < job.mem_per_node] = 0
        elif job.mem_per_cpu and job.cpus:
            limit = np.minimum(limit, self.mem // job.mem_per_cpu * g // job.cpus)
        elif job.mem_per_gpu:
            limit = np.minimum(limit, self.mem // job.mem_per_gpu)
        return limit

    def _static(self, job: PendingJob) -> np.ndarray:
        return _MASKS.lookup(self.topology, self._capacity, job)

    def _listed(self, job: PendingJob) -> np.ndarray | None:
        """Node indices of the job's ``-w`` list (``None`` without one)."""
        if not job.nodelist:
            return None
        index = self.topology.node_index
        return np.array(sorted({index[n] for n in job.nodelist if n in index}), dtype=np.int64)

    # ---- booking ----

    def take(self, job: PendingJob, gpus: Sequence[int]) -> tuple[int, ...]:
        """Book ``job`` starting on ``gpus``: its CPUs and memory leave its nodes (all that
        is left there when exclusive). Returns the GPUs the caller must mark unusable: the
        job's own, and every GPU of its nodes when it is exclusive."""
        return self.book(job, gpus)[0]

    def started(self, job: PendingJob, gpus: Sequence[int], now: float) -> RunningJob:
        """Book ``job`` as `take` does and return the running job it becomes (holding every
        GPU of its nodes when exclusive, with the CPUs and memory it took)."""
        return running(job, self.book(job, gpus), now)

    def book(self, job: PendingJob, gpus: Sequence[int]) -> Booking:
        """Book as `take` does; returns what `running` needs to make the running job later
        (a plan that may never ask for it pays no `RunningJob` per start)."""
        if self.cpus is None and not job.exclusive:
            return tuple(gpus), job.cpus, 0
        topo = self.topology
        nodes, k = np.unique(topo.gpu_node[list(gpus)], return_counts=True)
        held = _node_gpus(topo, nodes) if job.exclusive else tuple(gpus)
        if self.cpus is None:
            return held, job.cpus, 0
        assert self.mem is not None and self.idle is not None
        if job.exclusive:
            cpus, mem = self.cpus[nodes].copy(), self.mem[nodes].copy()
        else:
            cpus = -(-job.cpus * k // job.num_gpus)
            mem = job.mem_on(k, cpus)
        self.cpus[nodes] -= cpus
        self.mem[nodes] -= mem
        self.idle[nodes] = False
        return held, int(cpus.sum()), int(mem.sum())

    def release(self, run: RunningJob) -> tuple[int, ...]:
        """Give back what ``run`` holds, as when it ends (spread over its nodes in
        proportion to its GPUs there; an exclusive job's nodes whole again, where their
        sizes are known). Returns the GPUs that come back: its own, or every
        GPU of its nodes when it is exclusive."""
        if not run.exclusive and self.cpus is None:
            return run.gpus
        topo = self.topology
        nodes, k = np.unique(topo.gpu_node[list(run.gpus)], return_counts=True)
        cap = self._capacity
        if self.cpus is not None and run.exclusive and cap is not None and cap.total_cpus is not None:
            assert self.mem is not None and cap.total_mem is not None
            self.cpus[nodes] = cap.total_cpus[nodes]  # it held them whole: nothing else runs there
            self.mem[nodes] = cap.total_mem[nodes]
        elif self.cpus is not None and (run.cpus or run.mem):
            assert self.mem is not None
            self.cpus[nodes] += -(-run.cpus * k // run.num_gpus)
            self.mem[nodes] += -(-run.mem * k // run.num_gpus)
        return _node_gpus(topo, nodes) if run.exclusive else run.gpus


Booking = tuple[tuple[int, ...], int, int]
"""`Fit.book`'s account of a start: the GPUs it holds, and the CPUs and memory it took."""


def running(job: PendingJob, booking: Booking, now: float) -> RunningJob:
    """The running job a start booked by `Fit.book` becomes."""
    held, cpus, mem = booking
    return RunningJob(job.job_id, job.user, held, job.submit_time, now, job.time_limit,
                      cpus=cpus, mem=mem, exclusive=job.exclusive)


def when_all_end(state: ClusterState) -> tuple[np.ndarray, Fit]:
    """The GPUs that are up (free, or running a job) and the account once every running
    job has ended (their CPUs and memory back; what holds no GPU stays): what a job can
    ever get on the cluster as it is up. A job that gets too few GPUs of it never starts."""
    up = state.free.copy()
    fit = Fit.of(state)
    for run in state.running:
        up[list(fit.release(run))] = True
    return up, fit


def kept_for(job: PendingJob, gpus: Sequence[int], topology: Topology) -> tuple[int, ...]:
    """The GPUs ``job`` keeps from other jobs on ``gpus``: its own, or every GPU of its
    nodes when it is exclusive. What a hold of it must keep from the jobs behind it: an
    exclusive job held on half a node cannot start if a job backfilled the other half."""
    if not job.exclusive:
        return tuple(gpus)
    return _node_gpus(topology, np.unique(topology.gpu_node[list(gpus)]))


# ---- per-node masks of the static requests ----


class _NodeMasks:
    """Per-node masks of the requests that do not change while a job waits (partitions,
    GPU type, features, ``-w``, ``-x``), one per distinct request. Kept while the cluster
    and its node descriptions are the same objects, as they are for a whole replay and
    within one daemon cycle, so the queue's few distinct requests are worked out once."""

    def __init__(self) -> None:
        self._key: tuple[object, object, object, object] | None = None
        self._masks: dict[tuple, np.ndarray] = {}

    def lookup(self, topo: Topology, cap: NodeCapacity | None, job: PendingJob) -> np.ndarray:
        key = self._key
        types, features, parts = (None, None, None) if cap is None else (cap.gpu_type, cap.features, cap.partition_nodes or None)
        if key is None or key[0] is not topo or key[1] is not types or key[2] is not features or key[3] is not parts:
            self._key, self._masks = (topo, types, features, parts), {}
        within = None if parts is None else parts.get(job.partition)
        wanted = (job.gpu_type, job.features, job.nodelist, job.exclude, None if within is None else job.partition)
        mask = self._masks.get(wanted)
        if mask is None:
            mask = self._masks[wanted] = _static_mask(topo, types, features, within, job)
        return mask


_MASKS = _NodeMasks()


def _static_mask(topo: Topology, types: tuple[str, ...] | None, features: tuple[frozenset[str], ...] | None,
                 within: np.ndarray | None, job: PendingJob) -> np.ndarray:
    """Nodes of the job's partitions (``within``; ``None``: all), with its GPU type and
    features (unknown without node descriptions: not checked), in its ``-w`` list when it
    has one (a name the cluster lacks: nowhere), not in its ``-x`` list."""
    ok = np.ones(len(topo.nodes), bool) if within is None else within.copy()
    if types is not None and job.gpu_type:
        ok &= np.array([t == job.gpu_type for t in types])
    if features is not None and job.features:
        need = frozenset(job.features)
        ok &= np.array([need <= f for f in features])
    index = topo.node_index
    if job.nodelist:
        listed = np.zeros(len(ok), bool)
        if all(n in index for n in job.nodelist):
            listed[[index[n] for n in job.nodelist]] = True
        ok &= listed
    ok[[index[n] for n in job.exclude if n in index]] = False
    ok.setflags(write=False)
    return ok


# ---- helpers ----


def _sizes(topo: Topology) -> np.ndarray:
    return np.diff(topo.node_first_gpu)


def _block_sizings(blocks: Blocks, gpus: int, fewest: int) -> Iterator[tuple[int, int | None]]:
    """The node counts to size a block region for a job of ``gpus`` GPUs that can take no
    fewer than ``fewest`` nodes, each with the most GPUs a node may then give it (``None``:
    any): ``fewest`` itself, then the first count of each larger block level, with nodes
    capped so that fewer than that many cannot hold the job."""
    yield fewest, None
    for level in blocks.levels:
        nodes = (blocks.base_nodes << level) + 1
        if nodes <= fewest:
            continue
        cap = (gpus - 1) // (nodes - 1)
        if cap < 1:
            return
        yield nodes, cap


def _node_gpus(topo: Topology, nodes: np.ndarray) -> tuple[int, ...]:
    first = topo.node_first_gpu
    return tuple(g for n in nodes.tolist() for g in range(int(first[n]), int(first[n + 1])))


def _cover(room: np.ndarray, listed: np.ndarray, n: int) -> np.ndarray:
    """How many GPUs to keep on each node so that a job of ``n`` GPUs must touch every
    listed node: exactly ``n`` in all, at least one on each, the rest where most room is
    (all zero when that is impossible now)."""
    out = np.zeros_like(room)
    r = room[listed]
    if (r < 1).any() or int(r.sum()) < n or len(listed) > n:
        return out
    order = np.argsort(-r, kind="stable")
    extra = r[order] - 1
    before = np.cumsum(extra) - extra
    give = np.clip(n - len(listed) - before, 0, extra)
    keep = np.ones(len(listed), dtype=np.int64)
    keep[order] += give
    out[listed] = keep
    return out


def _fullest_first(topo: Topology, free: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """``free`` with at most ``keep[n]`` GPUs left on node ``n``: those of its fullest
    NVLink islands (a job cut to fewer GPUs on a node should still share islands)."""
    mask = free & (keep > 0)[topo.gpu_node]
    if (topo.per_node(mask) <= keep).all():
        return mask
    g = np.flatnonzero(mask)
    island = topo.gpu_island[g]
    island_free = np.bincount(island, minlength=topo.num_islands)
    node = topo.gpu_node[g]
    order = np.lexsort((g, island, -island_free[island], node))
    g, node = g[order], node[order]
    rank = np.arange(len(g)) - np.searchsorted(node, node)
    out = np.zeros_like(mask)
    out[g[rank < keep[node]]] = True
    return out
