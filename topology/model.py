"""The cluster model every other layer stands on: GPUs, NVLink islands, nodes, switches.

GPUs get dense global ids ``0..G-1`` so that the simulator and the policies can keep
free/busy state in one numpy array and ask link questions with integer arithmetic; the
human names (``node3:5``) are only for display and for Slurm.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from functools import cached_property

import numpy as np

from .blocks import Blocks


class Link(IntEnum):
    """How two GPUs talk, ordered from closest to farthest.

    The order matters: the slowest link of a GPU set is the ``max`` of its pairwise links.
    The names follow ``nvidia-smi topo -m`` (NV#, PIX/PXB, PHB/NODE, SYS) plus two network
    levels (same leaf switch, across the switch tree).
    """

    SELF = 0
    NVLINK = 1
    PCIE_SWITCH = 2  # PIX / PXB: through PCIe switches only
    PCIE_HOST = 3  # PHB / NODE: through a host bridge inside one NUMA socket
    SOCKET = 4  # SYS: across NUMA sockets (QPI/UPI/Infinity Fabric)
    NETWORK = 5  # different nodes under one leaf switch
    SPINE = 6  # different nodes under different leaf switches


@dataclass(frozen=True)
class Bandwidths:
    """Bus bandwidth per link class in GB/s, as an all-reduce sees it (nccl-tests busbw).

    Defaults are round figures for a modern cluster: NVLink 3/4 busbw, PCIe 4.0 x16,
    a cross-socket GPU peer hop (through both host bridges and UPI), 100 Gb/s InfiniBand,
    and a 2:1 oversubscribed spine. Each level is slower than the one inside it, so a
    more consolidated placement is never slower.
    """

    nvlink: float = 150.0
    pcie_switch: float = 24.0
    pcie_host: float = 20.0
    socket: float = 16.0
    network: float = 12.5
    spine: float = 6.25

    def of(self, link: Link) -> float:
        return {
            Link.SELF: float("inf"),
            Link.NVLINK: self.nvlink,
            Link.PCIE_SWITCH: self.pcie_switch,
            Link.PCIE_HOST: self.pcie_host,
            Link.SOCKET: self.socket,
            Link.NETWORK: self.network,
            Link.SPINE: self.spine,
        }[link]


@dataclass(frozen=True)
class Node:
    """One server: its GPUs' pairwise link classes and the leaf switch it hangs from.

    ``links[i][j]`` is the link between local GPUs ``i`` and ``j`` (``SELF`` on the
    diagonal). ``nvlink_bw`` optionally refines NVLink bandwidth per pair (``NV12`` vs
    ``NV4``); ``None`` means the cluster default.

    What Slurm also checks before it starts a job there, when the cluster describes it:
    ``cpus`` (Slurm's ``CPUs``), ``mem_mb`` (``RealMemory``, MB), ``gpu_type`` (the gres
    type, ``gpu:h100``) and ``features`` (``Features``). ``0`` and empty mean unknown:
    nothing is checked against them.
    """

    name: str
    links: tuple[tuple[Link, ...], ...]
    switch: str = "sw0"
    nvlink_bw: tuple[tuple[float, ...], ...] | None = None
    cpus: int = 0
    mem_mb: int = 0
    gpu_type: str = ""
    features: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for what, value in (("cpus", self.cpus), ("mem_mb", self.mem_mb)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"node {self.name}: {what} must be a whole number >= 0 (0: unknown), got {value!r}")
        if not isinstance(self.features, tuple) or not all(isinstance(f, str) and f for f in self.features):
            raise ValueError(f"node {self.name}: features must be a tuple of non-empty strings, got {self.features!r}")
        n = len(self.links)
        for i, row in enumerate(self.links):
            if len(row) != n:
                raise ValueError(f"node {self.name}: link matrix row {i} has {len(row)} entries, expected {n}")
            if row[i] != Link.SELF:
                raise ValueError(f"node {self.name}: GPU {i} must link to itself as SELF")
            for j, link in enumerate(row):
                if j != i and link == Link.SELF:
                    raise ValueError(f"node {self.name}: GPUs {i} and {j} cannot be SELF")
                if link != self.links[j][i]:
                    raise ValueError(f"node {self.name}: links {i}-{j} and {j}-{i} differ")
                if link > Link.SOCKET:
                    raise ValueError(f"node {self.name}: intra-node link {i}-{j} cannot be {link.name}")

    @property
    def num_gpus(self) -> int:
        return len(self.links)

    @cached_property
    def islands(self) -> tuple[tuple[int, ...], ...]:
        """NVLink islands: connected components of the NVLink graph (singletons included)."""
        seen: set[int] = set()
        out: list[tuple[int, ...]] = []
        for start in range(self.num_gpus):
            if start in seen:
                continue
            comp, stack = [], [start]
            seen.add(start)
            while stack:
                g = stack.pop()
                comp.append(g)
                for h, link in enumerate(self.links[g]):
                    if link == Link.NVLINK and h not in seen:
                        seen.add(h)
                        stack.append(h)
            out.append(tuple(sorted(comp)))
        return tuple(out)

    @cached_property
    def sockets(self) -> tuple[tuple[int, ...], ...]:
        """CPU sockets: local GPUs joined by anything but a socket-crossing link (``SOCKET``),
        lowest first; one socket when no link crosses. Slurm binds a job's cores to one."""
        out: list[tuple[int, ...]] = []
        seen: set[int] = set()
        for g in range(self.num_gpus):
            if g not in seen:
                group = tuple(h for h in range(self.num_gpus) if h == g or self.links[g][h] != Link.SOCKET)
                seen.update(group)
                out.append(group)
        return tuple(out)

    @classmethod
    def from_groups(
        cls,
        name: str,
        islands: list[list[int]] | tuple[tuple[int, ...], ...],
        sockets: list[list[int]] | tuple[tuple[int, ...], ...] | None = None,
        switch: str = "sw0",
    ) -> Node:
        """Build a node from NVLink islands and NUMA sockets (each a list of local GPU ids).

        Inside an island: NVLink. Otherwise same socket: PCIe through the host bridge;
        different sockets: SYS. Without ``sockets`` every GPU shares one socket.
        """
        gpus = sorted(g for isl in islands for g in isl)
        n = len(gpus)
        if gpus != list(range(n)):
            raise ValueError(f"node {name}: islands must cover GPUs 0..{n - 1} exactly once, got {gpus}")
        island_of = {g: k for k, isl in enumerate(islands) for g in isl}
        socket_of = {g: k for k, s in enumerate(sockets) for g in s} if sockets else {g: 0 for g in gpus}
        if sorted(socket_of) != gpus:
            raise ValueError(f"node {name}: sockets must cover GPUs 0..{n - 1} exactly once")
        rows = []
        for i in range(n):
            row = []
            for j in range(n):
                if i == j:
                    row.append(Link.SELF)
                elif island_of[i] == island_of[j] and len(islands[island_of[i]]) > 1:
                    row.append(Link.NVLINK)
                elif socket_of[i] == socket_of[j]:
                    row.append(Link.PCIE_HOST)
                else:
                    row.append(Link.SOCKET)
            rows.append(tuple(row))
        return cls(name=name, links=tuple(rows), switch=switch)


@dataclass(frozen=True)
class Topology:
    """A whole cluster: nodes, the switch tree above them, and link bandwidths.

    ``switch_parent`` maps each switch to its parent (``None`` for a root). Two nodes under
    the same leaf switch talk at ``NETWORK`` speed, otherwise at ``SPINE`` speed.
    ``blocks``: Slurm's block topology, where the site runs one (each block is then a leaf
    switch too): it decides which node sets slurmctld accepts for a job (`blocks.Blocks`).
    """

    nodes: tuple[Node, ...]
    switch_parent: dict[str, str | None] = field(default_factory=dict)
    bandwidths: Bandwidths = field(default_factory=Bandwidths)
    blocks: Blocks | None = None

    def __post_init__(self) -> None:
        if not self.nodes:
            raise ValueError("a cluster needs at least one node")
        names = [n.name for n in self.nodes]
        if len(set(names)) != len(names):
            dup = sorted({x for x in names if names.count(x) > 1})
            raise ValueError(f"duplicate node names: {', '.join(dup)}")
        if self.num_gpus == 0:
            raise ValueError("a cluster needs at least one GPU")

    # ---- dense per-GPU arrays (the simulator's and the policies' fast path) ----

    @cached_property
    def num_gpus(self) -> int:
        return sum(n.num_gpus for n in self.nodes)

    @cached_property
    def node_index(self) -> dict[str, int]:
        return {n.name: i for i, n in enumerate(self.nodes)}

    @cached_property
    def gpu_node(self) -> np.ndarray:
        """Node index of each global GPU id."""
        return _frozen(np.repeat(np.arange(len(self.nodes)), [n.num_gpus for n in self.nodes]))

    @cached_property
    def node_first_gpu(self) -> np.ndarray:
        """Global id of each node's local GPU 0 (plus a final sentinel = num_gpus)."""
        return _frozen(np.concatenate([[0], np.cumsum([n.num_gpus for n in self.nodes])]))

    @cached_property
    def gpu_local(self) -> np.ndarray:
        return _frozen(np.arange(self.num_gpus) - self.node_first_gpu[self.gpu_node])

    @cached_property
    def gpu_island(self) -> np.ndarray:
        """Global NVLink-island id of each GPU (islands numbered across the cluster)."""
        out = np.empty(self.num_gpus, dtype=np.int64)
        k = 0
        for ni, node in enumerate(self.nodes):
            base = self.node_first_gpu[ni]
            for isl in node.islands:
                out[[base + g for g in isl]] = k
                k += 1
        return _frozen(out)

    @cached_property
    def knows_cpus(self) -> bool:
        """Whether any node has a CPU count (Slurm's choice of GPUs then depends on which
        socket's cores are free, `agents.slurm_select`)."""
        return any(n.cpus for n in self.nodes)

    @cached_property
    def num_islands(self) -> int:
        return int(self.gpu_island.max()) + 1

    @cached_property
    def island_gpus(self) -> tuple[np.ndarray, ...]:
        """Global GPU ids of each island, ascending."""
        order = np.argsort(self.gpu_island, kind="stable")
        bounds = np.searchsorted(self.gpu_island[order], np.arange(self.num_islands + 1))
        return tuple(_frozen(order[bounds[k] : bounds[k + 1]]) for k in range(self.num_islands))

    @cached_property
    def island_node(self) -> np.ndarray:
        """Node index of each island."""
        return _frozen(self.gpu_node[[int(g[0]) for g in self.island_gpus]])

    @cached_property
    def node_islands(self) -> tuple[np.ndarray, ...]:
        """Global island ids inside each node, ascending."""
        island_node = self.island_node
        return tuple(_frozen(np.flatnonzero(island_node == ni)) for ni in range(len(self.nodes)))

    @cached_property
    def island_size(self) -> np.ndarray:
        return _frozen(np.bincount(self.gpu_island, minlength=self.num_islands))

    def per_node(self, mask: np.ndarray) -> np.ndarray:
        """GPUs of a bool ``mask`` (over global ids) on each node. Placers count free GPUs
        per node at every placement, which on 16,384 GPUs was the largest cost of a
        replay: where every node has 1, 2, 4 or 8 GPUs, a node's flags are one machine
        word and its count a popcount (17x a ``bincount``); else a sum per run of ids."""
        self._check_mask(mask)
        if self._gpuless_nodes:  # a run of no ids would count its neighbour's first GPU
            return np.bincount(self.gpu_node, weights=mask, minlength=len(self.nodes)).astype(np.int64)
        return _count_runs(mask, self._node_word, self.node_first_gpu[:-1], None)

    def _check_mask(self, mask: np.ndarray) -> None:
        """A popcount of a word of int or float flags would count bits, not GPUs."""
        if mask.dtype != np.bool_ or mask.shape != (self.num_gpus,):
            raise ValueError(f"a GPU mask must be {self.num_gpus} bools, got {mask.dtype} of shape {mask.shape}")

    @cached_property
    def _gpuless_nodes(self) -> bool:
        return any(n.num_gpus == 0 for n in self.nodes)

    def per_island(self, mask: np.ndarray) -> np.ndarray:
        """GPUs of a bool ``mask`` in each NVLink island, as `per_node`."""
        self._check_mask(mask)
        return _count_runs(mask, self._island_word, self._island_first_gpu, self._by_island)

    @cached_property
    def _node_word(self) -> np.dtype | None:
        return _word([n.num_gpus for n in self.nodes])

    @cached_property
    def _island_word(self) -> np.dtype | None:
        return _word(self.island_size.tolist()) if self._by_island is None else None

    @cached_property
    def _by_island(self) -> np.ndarray | None:
        """GPU ids grouped by island, ``None`` when they already are (every cluster file
        whose islands are runs of local GPU ids)."""
        order = np.argsort(self.gpu_island, kind="stable")
        return None if bool((order == np.arange(self.num_gpus)).all()) else _frozen(order)

    @cached_property
    def _island_first_gpu(self) -> np.ndarray:
        return _frozen(np.concatenate([[0], np.cumsum(self.island_size)[:-1]]).astype(np.int64))

    @cached_property
    def switch_names(self) -> tuple[str, ...]:
        return tuple(sorted({n.switch for n in self.nodes}))

    @cached_property
    def node_switch(self) -> np.ndarray:
        idx = {s: i for i, s in enumerate(self.switch_names)}
        return _frozen(np.array([idx[n.switch] for n in self.nodes], dtype=np.int64))

    @cached_property
    def switch_nodes(self) -> tuple[np.ndarray, ...]:
        """Node indices under each leaf switch (``switch_names`` order), ascending."""
        return tuple(_frozen(np.flatnonzero(self.node_switch == k)) for k in range(len(self.switch_names)))

    @cached_property
    def node_block(self) -> np.ndarray:
        """Each node's base block in `blocks` (Slurm's index), -1 for none: a node in no
        block takes no job under the block plugin (every node is in block 0 without one).
        Block members that are not nodes of this cluster (CPU-only ones) are skipped."""
        out = np.full(len(self.nodes), -1 if self.blocks is not None else 0, dtype=np.int64)
        if self.blocks is not None:
            index = self.node_index
            for k, members in reversed(list(enumerate(self.blocks.members))):  # the first block wins
                out[[index[n] for n in members if n in index]] = k
        return _frozen(out)

    @cached_property
    def gpu_switch(self) -> np.ndarray:
        return _frozen(self.node_switch[self.gpu_node])

    def gpu_name(self, gpu: int) -> str:
        return f"{self.nodes[int(self.gpu_node[gpu])].name}:{int(self.gpu_local[gpu])}"

    def gpu_id(self, node: str, local: int) -> int:
        ni = self.node_index[node]
        if not 0 <= local < self.nodes[ni].num_gpus:
            raise ValueError(f"node {node} has no GPU {local}")
        return int(self.node_first_gpu[ni]) + local

    # ---- links and communication ----

    def link(self, a: int, b: int) -> Link:
        """The link class between two global GPU ids."""
        na, nb = int(self.gpu_node[a]), int(self.gpu_node[b])
        if na != nb:
            return Link.NETWORK if self.node_switch[na] == self.node_switch[nb] else Link.SPINE
        return self.nodes[na].links[int(self.gpu_local[a])][int(self.gpu_local[b])]

    def _pair_bw(self, node: Node, i: int, j: int) -> float:
        link = node.links[i][j]
        if link == Link.NVLINK and node.nvlink_bw is not None:
            return node.nvlink_bw[i][j]
        return self.bandwidths.of(link)

    def _node_bottleneck(self, node: Node, local: list[int]) -> tuple[Link, float]:
        worst, bw = Link.SELF, float("inf")
        for x, i in enumerate(local):
            for j in local[x + 1 :]:
                worst = max(worst, node.links[i][j])
                bw = min(bw, self._pair_bw(node, i, j))
        return worst, bw

    def bottleneck(self, gpus: tuple[int, ...] | list[int] | np.ndarray) -> tuple[Link, float]:
        """The slowest link class inside a GPU set, and its bandwidth in GB/s."""
        gpus = [int(g) for g in gpus]
        if len(gpus) <= 1:
            return Link.SELF, float("inf")
        nodes = {int(self.gpu_node[g]) for g in gpus}
        if len(nodes) > 1:
            link = Link.NETWORK if len({int(self.node_switch[n]) for n in nodes}) == 1 else Link.SPINE
            return link, self.bandwidths.of(link)
        ni = nodes.pop()
        return self._node_bottleneck(self.nodes[ni], [int(self.gpu_local[g]) for g in gpus])

    def allreduce_seconds(self, gpus: Sequence[int] | np.ndarray, gbytes: float) -> float:
        """Time of one all-reduce of ``gbytes`` GB of gradients over ``gpus``.

        Hierarchical at every level, as NCCL's trees and rings behave: a ring of ``k``
        GPUs moves ``2(k-1)/k * bytes`` over its slowest link. First a ring inside each
        NVLink island, then a ring across the islands of each node, then a ring across
        the ``m`` nodes over the network (``NETWORK`` under one leaf switch, else
        ``SPINE``). The slowest island and node of each level count.
        """
        if len(gpus) <= 1 or gbytes <= 0:
            return 0.0
        by_node: dict[int, list[int]] = {}
        for g in gpus:
            g = int(g)
            by_node.setdefault(int(self.gpu_node[g]), []).append(int(self.gpu_local[g]))
        intra = max(self._node_allreduce(self.nodes[ni], local, gbytes) for ni, local in by_node.items())
        m = len(by_node)
        if m == 1:
            return intra
        same_leaf = len({int(self.node_switch[ni]) for ni in by_node}) == 1
        net_bw = self.bandwidths.network if same_leaf else self.bandwidths.spine
        return intra + 2 * (m - 1) / m * gbytes / net_bw

    def _node_allreduce(self, node: Node, local: list[int], gbytes: float) -> float:
        island_of = {g: k for k, isl in enumerate(node.islands) for g in isl}
        groups: dict[int, list[int]] = {}
        for g in local:
            groups.setdefault(island_of[g], []).append(g)
        t = 0.0
        for members in groups.values():
            k = len(members)
            if k > 1:
                _, bw = self._node_bottleneck(node, members)
                t = max(t, 2 * (k - 1) / k * gbytes / bw)
        m = len(groups)
        if m > 1:
            # one ring across islands; its slowest hop joins two different islands
            cross = min(
                self._pair_bw(node, i, j)
                for x, i in enumerate(local)
                for j in local[x + 1 :]
                if island_of[i] != island_of[j]
            )
            t += 2 * (m - 1) / m * gbytes / cross
        return t

    def ideal_gpus(self, n: int) -> tuple[int, ...]:
        """The most consolidated set of ``n`` GPUs on an empty cluster.

        Fills the largest NVLink islands of the largest node first, then whole nodes under
        one leaf switch; a trace's durations are taken to be measured at this placement.
        """
        if not 1 <= n <= self.num_gpus:
            raise ValueError(f"cannot place {n} GPUs on a {self.num_gpus}-GPU cluster")
        return _ideal_gpus(self, n)

    def least_spread(self, n: int) -> tuple[int, int, int]:
        """`spread` of `ideal_gpus`: the fewest (islands, nodes, leaf switches) ``n`` GPUs
        touch on an empty cluster, what a placement "split more than needed" exceeds.
        Cached per size: a plan asks it for each job it weighs."""
        cache = self._least_spread
        if n not in cache:
            cache[n] = self.spread(self.ideal_gpus(n))
        return cache[n]

    @cached_property
    def _least_spread(self) -> dict[int, tuple[int, int, int]]:
        return {}

    def spread(self, gpus: tuple[int, ...] | list[int] | np.ndarray) -> tuple[int, int, int]:
        """(islands, nodes, leaf switches) touched by a GPU set."""
        idx = np.asarray(gpus, dtype=np.int64)
        return (
            len(np.unique(self.gpu_island[idx])),
            len(np.unique(self.gpu_node[idx])),
            len(np.unique(self.gpu_switch[idx])),
        )

    @cached_property
    def gpus_per_node(self) -> int:
        """Largest node's GPU count (quick shapes are uniform). Cached: features read it at
        every decision, and a 2,048-node cluster made it a millisecond each time."""
        return max(n.num_gpus for n in self.nodes)

    @cached_property
    def declares_resources(self) -> bool:
        """Whether any node says more than its GPUs (CPUs, memory, GPU type, features)."""
        return any(n.cpus or n.mem_mb or n.gpu_type or n.features for n in self.nodes)


def _ideal_gpus(topo: Topology, n: int) -> tuple[int, ...]:
    # Switches by capacity, nodes by size, islands by size: consolidation first.
    by_switch: dict[int, list[int]] = {}
    for ni in range(len(topo.nodes)):
        by_switch.setdefault(int(topo.node_switch[ni]), []).append(ni)
    switches = sorted(by_switch, key=lambda s: -sum(topo.nodes[i].num_gpus for i in by_switch[s]))
    chosen: list[int] = []
    for s in switches:
        for ni in sorted(by_switch[s], key=lambda i: -topo.nodes[i].num_gpus):
            node = topo.nodes[ni]
            base = int(topo.node_first_gpu[ni])
            for isl in sorted(node.islands, key=len, reverse=True):
                for g in isl:
                    chosen.append(base + g)
                    if len(chosen) == n:
                        return tuple(sorted(chosen))
    raise AssertionError("unreachable: n <= num_gpus")


_WORDS: dict[int, np.dtype] = {1: np.dtype(np.uint8), 2: np.dtype(np.uint16), 4: np.dtype(np.uint32), 8: np.dtype(np.uint64)}


def _word(sizes: list[int]) -> np.dtype | None:
    """The unsigned integer as wide as every group of ``sizes`` GPUs (one byte per flag),
    ``None`` unless they are all equal and a machine word holds one."""
    return _WORDS.get(sizes[0]) if len(set(sizes)) == 1 else None


def _count_runs(mask: np.ndarray, word: np.dtype | None, starts: np.ndarray, order: np.ndarray | None) -> np.ndarray:
    """True flags of a bool ``mask`` per group of consecutive ids beginning at ``starts``
    (after the gather ``order``, when groups interleave). Groups of ``word``'s width: a
    popcount per word. Every group must have a GPU."""
    if word is not None and mask.flags.c_contiguous:
        return np.bitwise_count(mask.view(word)).astype(np.int64)
    return np.add.reduceat(mask if order is None else mask[order], starts, dtype=np.int64)


def _frozen(a: np.ndarray) -> np.ndarray:
    a = np.asarray(a)
    a.setflags(write=False)
    return a
