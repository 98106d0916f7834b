"""The GPUs Slurm's ``select/cons_tres`` gives a job on a node, and the core it binds it to.

With ``gres.conf`` tying GPUs to sockets (``Cores=``) and ``Links=``, slurmctld 22.05 first
gives the job its CPU cores, then its GPUs: the first one on the cores' socket, then those
best linked to it, then any (``_set_node_bits``, ``src/plugins/select/cons_common/
gres_select_filter.c``). Which socket the cores land on was read off the lab's own records
(``squeue --json`` keeps every job's socket and core; 80-job demos, both runs): among the
sockets with a free GPU, the one with the most free cores, the lower on ties. On the
unambiguous starts (no other job starting or ending on that node within a second) this
gives the recorded GPUs and socket on 155 of 156 (both runs of eleven 80-job demos,
``bench/slurm_select_check.py``); the lowest free indices, which the simulator used
before, on 144, splitting 4-GPU jobs over both NVLink islands where Slurm kept them in one.

Cores are what makes the choice depend on history: a 2-GPU job holds one core, so a
socket can have free cores and no free GPU, and a job's core can sit on the other socket
than some of its GPUs. `SlurmSelect` therefore remembers the socket of every job it placed
until the job is gone from the running jobs. A node without a CPU count (``cpus = 0``)
has no core limit: every socket ties, and the GPUs are the lowest free ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from attentived.topology import Topology

from .placement import lowest_free, tree_nodes
from .plan import Start
from .state import ClusterState, PendingJob

__all__ = ["SlurmSelect", "SlurmSelectPlacer", "start_order"]


def start_order(starts: Sequence[Start]) -> list[Start]:
    """The order in which a plan's starts go to Slurm (their priorities): the most GPUs
    first, ties in plan order. slurmctld starts them in that order within one pass, and each
    start's core tips which socket the next one finds freer: on the lab a 1-GPU job started
    first took a core on the socket the plan had kept for a 4-GPU job, whose GPUs Slurm
    then split over both NVLink islands (78 s instead of 40). A job that needs a whole
    socket, placed first, gets one; the small ones fill what is left."""
    return sorted(starts, key=lambda s: -len(s.gpus))


@dataclass
class SlurmSelect:
    """Slurm's GPU and core choice on a node, with the sockets of the cores every job it
    placed holds (see the module notes). One instance per replay: every start that goes
    through it must be one the replay makes."""

    #: job id -> ((node, socket, cores), ...) for the jobs placed and not seen gone yet
    _held: dict[str, tuple[tuple[int, int, int], ...]] = field(default_factory=dict, repr=False)
    _placed_at: dict[str, float] = field(default_factory=dict, repr=False)
    #: cores held per node and socket at ``_busy_now``, kept up to date within that instant
    _busy: dict[int, dict[int, int]] = field(default_factory=dict, repr=False)
    _busy_now: float | None = field(default=None, repr=False)

    def gpus(self, job_id: str, cpus: int, nodes: list[tuple[int, int]], free: np.ndarray,
             state: ClusterState) -> tuple[int, ...]:
        """The GPUs ``job_id`` gets from ``free``: ``count`` on each ``(node, count)`` of
        ``nodes``, ``cpus`` cores in all spread over them; its sockets are remembered."""
        topo = state.topology
        if not topo.knows_cpus:  # no cores to tell the sockets apart
            return tuple(g for node, count in nodes for g in lowest_free(topo, free, node, count))
        if state.now != self._busy_now:
            self._busy, self._busy_now = self._busy_cores(state), state.now
        held, out = [], []
        per_node = max(1, -(-cpus // len(nodes))) if cpus else 1
        for node, count in nodes:
            per = self._busy.setdefault(node, {})
            socket, gpus = self._pick(topo, node, count, free, per)
            per[socket] = per.get(socket, 0) + per_node
            out.extend(gpus)
            held.append((node, socket, per_node))
        self._held[job_id] = tuple(held)
        self._placed_at[job_id] = state.now
        return tuple(sorted(out))

    def hold(self, job_id: str, sockets: Sequence[tuple[int, int, int]], now: float) -> None:
        """Record that running ``job_id`` holds ``(node, socket, cores)`` on each of its
        nodes: for a driver that reads the allocation from Slurm (``squeue --json`` has each
        job's sockets and cores) instead of placing the job itself."""
        self._held[job_id] = tuple(sockets)
        self._placed_at[job_id] = now
        self._busy_now = None

    def held(self, job_id: str) -> tuple[tuple[int, int, int], ...]:
        """``(node, socket, cores)`` that ``job_id`` holds on each of its nodes (empty when
        it is not known)."""
        return self._held.get(job_id, ())

    def _pick(self, topo: Topology, node: int, count: int, free: np.ndarray,
              busy: dict[int, int]) -> tuple[int, list[int]]:
        base = int(topo.node_first_gpu[node])
        sockets = [[base + g for g in s] for s in topo.nodes[node].sockets]
        cpus = topo.nodes[node].cpus
        per_socket = cpus // len(sockets) if cpus else 0
        with_gpu = [s for s, g in enumerate(sockets) if free[g].any()]
        # the most free cores, the lower socket on ties (no CPU count: all tie)
        socket = min(with_gpu, key=lambda s: (busy.get(s, 0) - per_socket if cpus else 0, s)) if with_gpu else 0
        first = [g for g in sockets[socket] if free[g]][:count]
        lo, hi = int(topo.node_first_gpu[node]), int(topo.node_first_gpu[node + 1])
        rest = [g for g in range(lo, hi) if free[g] and g not in first][: count - len(first)]
        return socket, first + rest

    def _busy_cores(self, state: ClusterState) -> dict[int, dict[int, int]]:
        """Cores held per node and socket by the running jobs (and those placed at this
        instant, not running yet); jobs placed before and no longer running are forgotten."""
        running = {r.job_id: r for r in state.running}
        for job in [j for j, t in self._placed_at.items() if j not in running and t < state.now]:
            del self._held[job], self._placed_at[job]
        busy: dict[int, dict[int, int]] = {}
        for held in self._held.values():
            for node, socket, cores in held:
                per = busy.setdefault(node, {})
                per[socket] = per.get(socket, 0) + cores
        topo = state.topology
        for job_id, run in running.items():
            if job_id in self._held:
                continue
            # started by something else (a test's state): its core on its lowest GPU's socket
            for node in sorted({int(topo.gpu_node[g]) for g in run.gpus}):
                first = min(g for g in run.gpus if topo.gpu_node[g] == node) - int(topo.node_first_gpu[node])
                socket = next(k for k, s in enumerate(topo.nodes[node].sockets) if first in s)
                per = busy.setdefault(node, {})
                per[socket] = per.get(socket, 0) + 1
        return busy


@dataclass
class SlurmSelectPlacer:
    """Slurm's own placement: the nodes ``topology/tree`` picks (`tree_nodes`), on each the
    socket with the most free cores and its GPUs first, as select/cons_tres picks them; the
    lowest free GPUs where nodes have no CPU counts."""

    name: str = "slurm-select"
    select: SlurmSelect = field(default_factory=SlurmSelect)

    def place(self, job: PendingJob, free: np.ndarray, state: ClusterState) -> tuple[int, ...] | None:
        topo = state.topology
        nodes = tree_nodes(job, topo.per_node(free), topo.node_switch)
        if nodes is None:
            return None
        return self.select.gpus(job.job_id, job.cpus, nodes, free, state)
