"""The Proximity-DRL-style baseline: an MLP that picks a job's GPUs one at a time.

After Deng et al. (Canadian AI 2024), who place each job of a heuristically ordered queue by
choosing GPUs one by one with a PPO-trained MLP on a small fixed cluster (2 racks x 4
machines x 4 GPUs, a queue window of 10). Here:

* the job order is a heuristic `JobChooser` (FIFO by default, as theirs), run by the usual
  `Scheduler` loop without backfill; only placement is learned;
* `ProximityPlacer` is a `Placer`: for a job of ``g`` GPUs it asks the network ``g`` times,
  each time for one more GPU among the free ones not yet picked, seeing what it picked so
  far. A job that fixed its node count (``sbatch -N``, as Slurm jobs with
  ``--gpus-per-node`` do) is shaped by the mask: the node being filled until it has its
  share, then only untouched nodes with room for a whole share. The mask also keeps a job
  in the tightest group that can hold it (one NVLink island, else one node, else one leaf
  switch): the network picks which group and which GPUs in it, never a split when a
  tighter set is free;
* the network (`attentived.agents.mlp.ProximityNet`) reads a fixed ``max_gpus`` GPU slots:
  GPU ids are dense and node-major, so slot ``i`` is always GPU ``i``; clusters with more
  GPUs are refused with a clear error rather than truncated.

What it sees (`observe`) is built from `ClusterState` alone, like every policy: per GPU
whether it exists, is free, is already picked, when it is expected back (running jobs'
time limits), how far it is from the GPUs picked so far (same island, node, leaf switch,
or beyond), and which fraction of its island and of its node is free (occupancy the
attentive GPU agent reads from its node tokens; without it an MLP over GPU slots must
infer the grouping from slot positions); for the job its size, how many GPUs remain to pick, its estimated run
time and communication sensitivity; and the sizes and estimates of the next ``window``
jobs in the queue order (what the paper's queue window shows).

The same `observe` feeds training (`attentived.training.gpu_env.GpuByGpuEnv`) and
inference, so what PPO learned is what runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from attentived.topology import Topology

from .features import Context, FeatureEncoder, fits, log_time
from .order import estimated_runtime
from .state import ClusterState, PendingJob, free_counts

GPU_FEATURES = 7
QUEUE_WINDOW = 10
_JOB_INPUTS = 8
GLOBAL_FEATURES = _JOB_INPUTS + 3 * QUEUE_WINDOW

_DAY = 86_400.0


class ClusterTooLarge(ValueError):
    """The cluster has more GPUs than the network's fixed input."""


def too_large(max_gpus: int, topology: Topology) -> str | None:
    """Why a network reading ``max_gpus`` GPU slots cannot schedule ``topology``, or None."""
    if topology.num_gpus > max_gpus:
        return f"its network reads at most {max_gpus} GPUs, the cluster has {topology.num_gpus}"
    return None


def can_place(job: PendingJob, free: np.ndarray, topology: Topology) -> bool:
    """Whether ``job`` fits the GPUs ``free`` leaves (node shape included)."""
    return fits(job, int(free.sum()), free_counts(topology, free)[1])


@dataclass
class Observer:
    """Builds the network's input for (state, free GPUs, job, GPUs picked so far).

    Keeps the per-state arrays (when each GPU is expected back, the queue order) for the
    last state it saw: the placer asks once per GPU, on the same snapshot."""

    max_gpus: int
    window: int = QUEUE_WINDOW
    _encoder: FeatureEncoder = field(default_factory=lambda: FeatureEncoder(QUEUE_WINDOW, 1))
    _state: ClusterState | None = None
    _until: np.ndarray | None = None
    _fifo: np.ndarray | None = None

    def _prepare(self, state: ClusterState) -> None:
        if state is self._state:
            return
        reason = too_large(self.max_gpus, state.topology)
        if reason:
            raise ClusterTooLarge(f"proximity-drl: {reason} (train one with a larger max_gpus)")
        self._state, self._until = state, Context.of(state).until_free
        self._fifo = state.queue.arrival

    def observe(self, state: ClusterState, free: np.ndarray, job: PendingJob, picked: list[int]) -> dict[str, np.ndarray]:
        """``gpus`` [max_gpus, GPU_FEATURES], ``globals`` [GLOBAL_FEATURES], ``action_mask``
        [max_gpus] (free, not picked, real). GPUs busy in ``free`` but not running in
        ``state`` (started earlier in the same plan) count as back in a day."""
        self._prepare(state)
        topo = state.topology
        n, G = topo.num_gpus, self.max_gpus
        assert self._until is not None  # set by _prepare
        until = np.where(free, 0.0, np.where(state.free, _DAY, self._until))
        chosen = np.zeros(n, bool)
        chosen[picked] = True
        available = free & ~chosen
        gpus = np.zeros((G, GPU_FEATURES), np.float32)
        gpus[:n, 0] = 1.0
        gpus[:n, 1] = available
        gpus[:n, 2] = chosen
        gpus[:n, 3] = log_time(until)
        gpus[:n, 4] = distance_to(topo, picked)
        island_free, node_free = free_counts(topo, available)
        gpus[:n, 5] = (island_free / topo.island_size)[topo.gpu_island]
        gpus[:n, 6] = (node_free / np.diff(topo.node_first_gpu))[topo.gpu_node]
        mask = np.zeros(G, np.int8)
        mask[:n] = available & _shape_mask(topo, job, picked, available) & _tight_mask(topo, job, picked, available)
        est = estimated_runtime(job, state)
        glob = np.zeros(GLOBAL_FEATURES, np.float32)
        glob[0] = math.log2(job.num_gpus) / 6.0
        glob[1] = (job.num_gpus - len(picked)) / job.num_gpus
        glob[2] = math.isfinite(est)
        glob[3] = log_time(est) if math.isfinite(est) else 0.0
        glob[4] = math.log1p(self._encoder.comm_ratio(job, topo)) if job.num_gpus > 1 else 0.0
        glob[5] = log_time(state.now - job.submit_time)
        glob[6] = available.sum() / n
        glob[7] = math.log2(n) / 12.0
        q = state.queue
        assert self._fifo is not None  # set by _prepare
        nxt = [int(i) for i in self._fifo[: self.window + 1] if state.pending[int(i)].job_id != job.job_id][: self.window]
        for s, i in enumerate(nxt):
            other = state.pending[i]
            e = estimated_runtime(other, state)
            row = glob[_JOB_INPUTS + 3 * s : _JOB_INPUTS + 3 * s + 3]
            row[0] = 1.0
            row[1] = math.log2(int(q.gpus[i])) / 6.0
            row[2] = log_time(e) if math.isfinite(e) else 1.5
        return {"gpus": gpus, "globals": glob, "action_mask": mask}


def _shape_mask(topo: Topology, job: PendingJob, picked: list[int], available: np.ndarray) -> np.ndarray:
    """GPUs the next pick may take so the job keeps its node shape: with ``num_nodes`` set,
    the partly filled node while it lacks GPUs, else untouched nodes with room for a share.
    Node by node, a shape that fitted at the first pick always stays completable."""
    if job.num_nodes is None:
        return np.ones(topo.num_gpus, bool)
    per = job.num_gpus // job.num_nodes
    nodes = len(topo.nodes)
    counts = np.bincount(topo.gpu_node[picked], minlength=nodes) if picked else np.zeros(nodes, np.int64)
    filling = np.flatnonzero((counts > 0) & (counts < per))
    if len(filling):
        return topo.gpu_node == filling[0]
    room = np.bincount(topo.gpu_node, weights=available, minlength=nodes) >= per
    return (room & (counts == 0))[topo.gpu_node]


def _tight_mask(topo: Topology, job: PendingJob, picked: list[int], available: np.ndarray) -> np.ndarray:
    """GPUs the next pick may take so the job ends in the tightest group that can hold it:
    one NVLink island if one has room for the whole job, else one node, else one leaf
    switch. The first pick chooses among such groups; later picks stay in the group of the
    ones before. A job spread over a fixed number of nodes is left to `_shape_mask`."""
    everywhere = np.ones(topo.num_gpus, bool)
    if job.num_nodes not in (None, 1):
        return everywhere
    room = available.copy()
    room[picked] = True  # what the job holds or may still take
    for group in (topo.gpu_island, topo.gpu_node, topo.gpu_switch):
        size = np.bincount(group, weights=room)
        if picked:
            mine = np.unique(group[picked])
            if len(mine) == 1 and size[mine[0]] >= job.num_gpus:
                return group == mine[0]
        elif (size >= job.num_gpus).any():
            return (size >= job.num_gpus)[group]
    return everywhere


def distance_to(topo: Topology, picked: list[int]) -> np.ndarray:
    """Per GPU, how far the nearest picked GPU is: 0.25 same island, 0.5 same node, 0.75
    same leaf switch, 1 beyond; 0 when nothing is picked yet."""
    n = topo.num_gpus
    if not picked:
        return np.zeros(n, np.float32)
    p = np.asarray(picked)
    out = np.ones(n, np.float32)
    out[np.isin(topo.gpu_switch, topo.gpu_switch[p])] = 0.75
    out[np.isin(topo.gpu_node, topo.gpu_node[p])] = 0.5
    out[np.isin(topo.gpu_island, topo.gpu_island[p])] = 0.25
    return out


def teacher_gpu(state: ClusterState, allowed: np.ndarray, picked: list[int], preferred: tuple[int, ...]) -> int:
    """The teacher's next GPU: the lowest free one of ``preferred`` (the consolidated
    placement of the whole job, computed when its first GPU is picked), so from an empty pick
    it reproduces `Consolidate`; once the agent has strayed and ``preferred`` is used up, the
    allowed GPU (the observation's mask) nearest to those picked so far, then the lowest id."""
    topo = state.topology
    available = np.flatnonzero(allowed[: topo.num_gpus])
    dist = distance_to(topo, picked)[available]
    outside = ~np.isin(available, preferred)
    return int(available[np.lexsort((available, dist, outside))[0]])


class ProximityPlacer:
    """`Placer` over a trained `ProximityNet`: one network call per GPU (argmax)."""

    name = "proximity-drl"

    def __init__(self, net: Any, *, deterministic: bool = True, seed: int = 0) -> None:
        import torch

        self._torch = torch
        self.net = net.eval()
        self.observer = Observer(net.max_gpus)
        self.deterministic = deterministic
        self._gen = torch.Generator().manual_seed(seed)

    def unsupported(self, topology: Topology) -> str | None:
        """Why this network cannot place on ``topology`` (more GPUs than its input), or None."""
        return too_large(self.net.max_gpus, topology)

    def place(self, job: PendingJob, free: np.ndarray, state: ClusterState) -> tuple[int, ...] | None:
        if not can_place(job, free, state.topology):
            return None
        torch = self._torch
        picked: list[int] = []
        with torch.inference_mode():
            for _ in range(job.num_gpus):
                obs = self.observer.observe(state, free, job, picked)
                logits, _ = self.net({k: torch.from_numpy(v)[None] for k, v in obs.items()})
                if self.deterministic:
                    g = int(torch.argmax(logits, -1)[0])
                else:
                    g = int(torch.multinomial(torch.softmax(logits, -1), 1, generator=self._gen)[0, 0])
                picked.append(g)
        return tuple(sorted(picked))
