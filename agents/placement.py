"""Heuristic GPU placers: first-fit (Slurm without topology), consolidate, load-balance, random.

All work on per-island and per-node free counts (``np.bincount`` over the dense GPU ids),
so one call costs a few microseconds on a 512-GPU cluster: the simulator places tens of
thousands of jobs per replay.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from attentived.topology import Topology

from .state import ClusterState, PendingJob, free_counts


def packed(topo: Topology, gpus: tuple[int, ...], num_nodes: int | None = None) -> bool:
    """Whether ``gpus`` touch no more NVLink islands and nodes than their count needs on an
    empty cluster (`Topology.least_spread`); for a job that fixed its node count
    (``num_nodes``), no more islands than that shape needs on each of its nodes."""
    islands, nodes, _ = topo.spread(gpus)
    if num_nodes is not None:
        return nodes == num_nodes and islands <= num_nodes * topo.least_spread(len(gpus) // num_nodes)[0]
    least_islands, least_nodes, _ = topo.least_spread(len(gpus))
    return islands <= least_islands and nodes <= least_nodes


def on_fullest_nodes(state: ClusterState, free: np.ndarray, n: int, k: int) -> tuple[int, ...] | None:
    """``n`` GPUs of ``free`` from the ``k`` nodes with the most of them (their fullest
    islands first), or ``None`` when those hold fewer: the fewest nodes whatever the
    switches, where `Consolidate` takes the fewest switches first."""
    island_free, node_free = _counts(state, free)
    nodes = np.argsort(-node_free, kind="stable")[:k]
    if int(node_free[nodes].sum()) < n:
        return None
    return _take(state.topology, free, island_free, node_free, nodes.tolist(), None, n)


def _counts(state: ClusterState, free: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`free_counts` of ``free``: the state's own, computed once, when it is its mask."""
    return state.free_counts if free is state.free else free_counts(state.topology, free)


def _take(topo: Topology, free: np.ndarray, island_free: np.ndarray, node_free: np.ndarray, nodes: list[int],
          per_node: int | None, n: int) -> tuple[int, ...]:
    """Collect ``n`` free GPUs from ``nodes`` in the given order, ``per_node`` from each when
    set, filling each node's fullest islands first so the job touches the fewest islands
    (a node it takes whole needs no choice: most nodes of a multi-node job)."""
    out: list[int] = []
    for ni in nodes:
        want = min(per_node if per_node is not None else n, n - len(out))
        if want >= node_free[ni]:
            lo, hi = int(topo.node_first_gpu[ni]), int(topo.node_first_gpu[ni + 1])
            out.extend((np.flatnonzero(free[lo:hi]) + lo).tolist())
        else:
            isl = topo.node_islands[ni]
            for k in isl[np.argsort(-island_free[isl], kind="stable")]:
                g = topo.island_gpus[k]
                got = g[free[g]][:want]
                out.extend(got.tolist())
                want -= len(got)
                if want == 0:
                    break
        if len(out) == n:
            return tuple(sorted(out))
    raise AssertionError("caller checked capacity")


def _best_fit(counts: np.ndarray, n: int) -> int | None:
    """The group with the fewest free GPUs that still holds ``n`` (the first on ties), or
    ``None``: one pass with no index arrays, as a placement runs at every decision."""
    held = np.where(counts >= n, counts, _NEVER)
    best = int(held.argmin())
    return best if held[best] != _NEVER else None


_NEVER = np.iinfo(np.int64).max


def _shaped(job: PendingJob) -> tuple[int, int] | None:
    """(nodes, GPUs per node) when the job fixed its node count, else ``None``."""
    if job.num_nodes is None:
        return None
    return job.num_nodes, job.num_gpus // job.num_nodes


def first_fit_nodes(job: PendingJob, node_free: np.ndarray) -> list[tuple[int, int]] | None:
    """(node, GPUs) pairs that Slurm's select without topology gives ``job`` on free counts
    ``node_free``: a fixed shape on the lowest nodes with room, else the lowest node that
    holds the whole job, else nodes in index order; ``None`` if it does not fit. Counts may
    be negative where a backfill timeline has overbooked a node (they count as none)."""
    g = job.num_gpus
    shape = _shaped(job)
    if shape is not None:
        k, per = shape
        ok = np.flatnonzero(node_free >= per)[:k]
        return [(node, per) for node in ok.tolist()] if len(ok) == k else None
    whole = np.flatnonzero(node_free >= g)
    if len(whole):
        return [(int(whole[0]), g)]
    return _spread(g, node_free)


def _spread(g: int, node_free: np.ndarray) -> list[tuple[int, int]] | None:
    """``g`` GPUs that no node holds whole, from the nodes with free ones in index order."""
    nodes = np.flatnonzero(node_free > 0)
    have = node_free[nodes]
    if int(have.sum()) < g:
        return None
    out: list[tuple[int, int]] = []
    for node, k in zip(nodes.tolist(), have.tolist()):
        out.append((node, min(k, g)))
        g -= k
        if g <= 0:
            break
    return out


def tree_nodes(job: PendingJob, node_free: np.ndarray, node_switch: np.ndarray) -> list[tuple[int, int]] | None:
    """(node, GPUs) pairs that Slurm's ``select/cons_tres`` with ``topology/tree`` gives
    ``job`` on free counts ``node_free`` (``_eval_nodes_topo``, 22.05): of the leaf switches
    with enough nodes that can hold the job's GPUs per node, the one with the *fewest* such
    nodes (the first on ties), and its lowest such nodes; a job no leaf holds takes the
    leaves with the most such nodes first, then the tightest leaf that holds the rest. A job
    without a fixed node count is a one-node job where a node holds it whole, else takes
    nodes in index order (`first_fit_nodes`). ``None`` if it does not fit.

    Why not the lowest nodes with room (`first_fit_nodes`): on the lab (two leaf switches of
    two nodes) Slurm put 1-GPU jobs on a switch's only free node rather than on the lowest
    node of the other, which had room too; replaying Slurm alone's recorded starts, this
    rule gives Slurm's nodes on 825 of 880 starts (eleven 80-job demos, `bench/slurm_select_check.py`)
    where the lowest nodes with room give 790."""
    shape = _shaped(job)
    if shape is None:
        k, per = 1, job.num_gpus
        ok = node_free >= per
        if not ok.any():  # spread over nodes; a 1-GPU job (most jobs) cannot be
            return _spread(per, node_free) if per > 1 else None
    else:
        k, per = shape
        ok = node_free >= per
    counts = np.bincount(node_switch[ok])  # per leaf (up to the last with such a node)
    if k == 1:  # most jobs: the tightest leaf with one, its lowest such node
        if not len(counts):
            return None
        leaf = int(np.where(counts > 0, counts, _NEVER).argmin())
        return [(int((ok & (node_switch == leaf)).argmax()), per)]
    if int(counts.sum()) < k:
        return None
    out: list[int] = []
    while len(out) < k:
        need = k - len(out)
        held = np.where(counts >= need, counts, _NEVER)
        leaf = int(held.argmin()) if held.min() != _NEVER else int(counts.argmax())
        out.extend(np.flatnonzero(ok & (node_switch == leaf))[:need].tolist())
        counts[leaf] = 0
    return [(node, per) for node in sorted(out)]


@dataclass
class FirstFit:
    """Slurm's select without topology: the lowest-numbered node that holds the whole job,
    lowest GPU indices first; a job too big for any node takes nodes in name order."""

    name: str = "first-fit"

    def place(self, job: PendingJob, free: np.ndarray, state: ClusterState) -> tuple[int, ...] | None:
        topo = state.topology
        if job.num_gpus == 1 and job.num_nodes is None:
            # The lowest free GPU is on the lowest node with one (most jobs of a trace ask one GPU).
            g = int(free.argmax())
            return (g,) if free[g] else None
        nodes = first_fit_nodes(job, topo.per_node(free))  # islands do not matter here
        if nodes is None:
            return None
        out: list[int] = []
        for node, k in nodes:
            out.extend(lowest_free(topo, free, node, k))
        return tuple(out)


def lowest_free(topo: Topology, free: np.ndarray, node: int, count: int) -> list[int]:
    """The ``count`` lowest-numbered free GPUs of ``node`` (fewer when it has fewer free):
    what Slurm's GPU selection takes on a node."""
    lo, hi = int(topo.node_first_gpu[node]), int(topo.node_first_gpu[node + 1])
    return [int(x) + lo for x in np.flatnonzero(free[lo:hi])[:count]]


@dataclass
class Consolidate:
    """Fewest islands, then fewest nodes, then fewest switches, each by best fit (the
    smallest group that still holds the job), so large free groups stay whole for large
    jobs. The placement a communication-heavy job wants."""

    name: str = "consolidate"

    def place(self, job: PendingJob, free: np.ndarray, state: ClusterState) -> tuple[int, ...] | None:
        topo = state.topology
        n = job.num_gpus
        island_free, node_free = _counts(state, free)
        shape = _shaped(job)
        if shape is not None and shape[0] > 1:
            return _consolidate_shaped(topo, free, island_free, node_free, *shape)
        best = _best_fit(island_free, n)
        if best is not None:
            g = topo.island_gpus[best]
            return tuple(int(x) for x in g[free[g]][:n])
        best = _best_fit(node_free, n)
        if best is not None:
            return _take(topo, free, island_free, node_free, [best], None, n)
        if shape is not None or node_free.sum() < n:  # ``-N 1``: one node or nothing
            return None
        switch_free = np.bincount(topo.node_switch, weights=node_free, minlength=len(topo.switch_names)).astype(np.int64)
        best = _best_fit(switch_free, n)
        if best is not None:
            nodes = topo.switch_nodes[best]
            nodes = nodes[np.argsort(-node_free[nodes], kind="stable")]
        else:
            # Across switches: the freest switches first, then their freest nodes.
            nodes = np.lexsort((-node_free, -switch_free[topo.node_switch]))
        return _take(topo, free, island_free, node_free, nodes[node_free[nodes] > 0].tolist(), None, n)


def _consolidate_shaped(
    topo: Topology, free: np.ndarray, island_free: np.ndarray, node_free: np.ndarray, k: int, per: int
) -> tuple[int, ...] | None:
    ok = np.flatnonzero(node_free >= per)
    if len(ok) < k:
        return None
    # Prefer one switch that has k suitable nodes (best fit by its count of them).
    sw = topo.node_switch[ok]
    counts = np.bincount(sw, minlength=len(topo.switch_names))
    best = _best_fit(counts, k)
    if best is not None:
        ok = ok[sw == best]
    ok = ok[np.argsort(node_free[ok], kind="stable")]  # best fit: the tightest nodes
    return _take(topo, free, island_free, node_free, ok[:k].tolist(), per, per * k)


@dataclass
class LoadBalance:
    """Worst fit: the emptiest nodes first, spreading heat and load (what some sites do to
    keep nodes' power even); the opposite of consolidation."""

    name: str = "load-balance"

    def place(self, job: PendingJob, free: np.ndarray, state: ClusterState) -> tuple[int, ...] | None:
        topo = state.topology
        island_free, node_free = _counts(state, free)
        shape = _shaped(job)
        nodes = np.argsort(-node_free, kind="stable")
        if shape is not None:
            k, per = shape
            nodes = nodes[node_free[nodes] >= per][:k]
            if len(nodes) < k:
                return None
            return _take(topo, free, island_free, node_free, nodes.tolist(), per, job.num_gpus)
        if node_free.sum() < job.num_gpus:
            return None
        return _take(topo, free, island_free, node_free, nodes[node_free[nodes] > 0].tolist(), None, job.num_gpus)


@dataclass
class RandomPlacer:
    """Any free GPUs, uniformly at random: the floor every topology-aware placer must beat."""

    seed: int = 0
    name: str = "random"
    _rng: np.random.Generator = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._rng = np.random.default_rng(self.seed)

    def place(self, job: PendingJob, free: np.ndarray, state: ClusterState) -> tuple[int, ...] | None:
        topo = state.topology
        shape = _shaped(job)
        if shape is not None:
            k, per = shape
            _, node_free = _counts(state, free)
            ok = np.flatnonzero(node_free >= per)
            if len(ok) < k:
                return None
            out: list[int] = []
            for ni in self._rng.choice(ok, size=k, replace=False):
                lo, hi = int(topo.node_first_gpu[ni]), int(topo.node_first_gpu[ni + 1])
                cand = np.flatnonzero(free[lo:hi]) + lo
                out.extend(int(x) for x in self._rng.choice(cand, size=per, replace=False))
            return tuple(sorted(out))
        cand = np.flatnonzero(free)
        if len(cand) < job.num_gpus:
            return None
        return tuple(sorted(int(x) for x in self._rng.choice(cand, size=job.num_gpus, replace=False)))
