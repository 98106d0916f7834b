"""Slurm's block topology (``topology/block``, 23.11 on): which node sets slurmctld accepts.

Sites with rack-scale NVLink domains (an NVL72 rack is one block) describe them as blocks
in topology.conf (``BlockName=``, ``BlockSizes=``) or topology.yaml. Unlike the tree
plugin, which only prefers few switches, the block plugin refuses a job whose nodes do
not sit where its size says they must (`eval_nodes_block.c`, the same rule in 24.11 and
26.05):

* base blocks are numbered in the file's order; a block of level ``k`` is an aligned run
  of ``2**k`` of them (base block ``i`` is in block ``i >> k``);
* the levels a site allows come from ``BlockSizes`` (each a power-of-two multiple of the
  first, the base block size); without it levels 0 to 4 (``bit_nset(block_levels, 0, 4)``,
  inclusive: 1 to 16 base blocks), and the base size is the first block's node count;
* a job of ``n`` nodes needs ``ceil(n / base)`` base blocks, rounded up to a power of two
  ``2**raw``; it must lie in one block of the lowest allowed level ``L >= raw`` (the whole
  cluster where none is that large), and inside it touch at most ``ceil(n / size)`` of
  the blocks of the highest allowed level below ``raw`` (the "llblocks", of ``size``
  nodes);
* nodes in no block take no job.

A pinned job (``ReqNodeList``) counts as many nodes as it is pinned to, so a plan that
pins across blocks is refused: `Blocks.region` is the set of nodes inside which every
placement of a job passes, and `Blocks.allows` the check itself.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

#: Slurm's MAX_BLOCK_LEVELS: a level above 15 is refused.
MAX_LEVEL = 15


@dataclass(frozen=True)
class Blocks:
    """A block topology: base blocks in Slurm's order, their nodes, the base block size in
    nodes and the aggregation levels allowed (ascending, 0 first)."""

    names: tuple[str, ...]
    members: tuple[tuple[str, ...], ...]
    base_nodes: int
    levels: tuple[int, ...]

    @classmethod
    def of(cls, names: Sequence[str], members: Sequence[Sequence[str]], sizes: Sequence[int] = ()) -> Blocks:
        """From the blocks as listed and ``BlockSizes`` (empty: Slurm's default). Raises
        ``ValueError`` saying what Slurm would refuse."""
        if not names:
            raise ValueError("no blocks")
        seen: set[str] = set()
        for name in names:
            if name in seen:
                raise ValueError(f"block {name} is defined twice")
            seen.add(name)
        if not sizes:
            base = next((len(m) for m in members if m), 0)
            if not base:
                raise ValueError("blocks hold no nodes and BlockSizes is not set")
            return cls(tuple(names), tuple(tuple(m) for m in members), base, (0, 1, 2, 3, 4))
        base = sizes[0]
        levels = {0}
        for size in sizes:
            ratio = size // base if size > 0 and base > 0 else 0
            if size <= 0 or size % base or ratio & (ratio - 1) or ratio.bit_length() - 1 > MAX_LEVEL:
                raise ValueError(f"BlockSizes value {size}: each must be the first ({base}) times a power of two")
            levels.add(ratio.bit_length() - 1)
        return cls(tuple(names), tuple(tuple(m) for m in members), base, tuple(sorted(levels)))

    def levels_for(self, nodes: int) -> tuple[int, int, int]:
        """For a job of ``nodes`` nodes: the level of the block it must lie in (-1: the whole
        cluster), the level of the llblocks inside it, and how many of those it may touch."""
        raw = math.ceil(math.log2(max(1, -(-nodes // self.base_nodes))))
        level = next((k for k in self.levels if k >= raw), -1)
        low = max((k for k in self.levels if k <= raw - 1), default=0) if raw > 0 else 0
        return level, low, -(-nodes // ((1 << low) * self.base_nodes))

    def allows(self, node_block: np.ndarray, nodes: Sequence[int] | np.ndarray) -> bool:
        """Whether slurmctld accepts a job on exactly ``nodes`` (node indices; ``node_block``:
        each node's base block, -1 for none)."""
        at = node_block[np.asarray(nodes, dtype=np.int64)]
        if not len(at) or (at < 0).any():
            return False
        level, low, most = self.levels_for(len(at))
        if level >= 0 and len(np.unique(at >> level)) > 1:
            return False
        return len(np.unique(at >> low)) <= most

    def region(self, node_block: np.ndarray, room: np.ndarray, need: int, nodes: int) -> np.ndarray:
        """Per node, whether it is in the part of the cluster where a job of at least
        ``nodes`` nodes is placed: one block of its level and, inside, the llblocks it may
        touch with the most ``room`` (per node: what counts toward ``need``). Every set of
        at least ``nodes`` nodes inside passes `allows`. Of the blocks whose part holds
        ``need``, one where it takes the fewest nodes (a job that fits a free node is not
        split because another block fits it more tightly), then the one holding least
        (best fit, as slurmctld picks); where none holds it, the one holding most (the job
        does not fit now)."""
        count = len(self.names)
        inside = node_block >= 0
        per_base = np.bincount(node_block[inside], weights=room[inside], minlength=count)
        level, low, most = self.levels_for(nodes)
        span = 1 << low  # base blocks per llblock
        width = count if level < 0 else 1 << level  # base blocks per block
        per_low = np.add.reduceat(per_base, np.arange(0, count, span))
        lows = -(-width // span)  # llblocks per block
        groups = -(-len(per_low) // lows)
        flat = np.full(groups * lows, -1.0)  # a last block short of base blocks: padded, never picked
        flat[: len(per_low)] = per_low
        table = flat.reshape(groups, lows)
        order = np.argsort(-table, axis=1, kind="stable")[:, :most]
        held = np.take_along_axis(table, order, axis=1).clip(min=0).sum(axis=1)
        enough = np.flatnonzero(held >= need)
        on_low = np.where(inside, node_block // span, -1)
        if len(enough) > 1:
            fewest = _fewest_nodes(on_low, room, order, lows, groups, need)[enough]
            best = int(enough[np.lexsort((held[enough], fewest))[0]])
        else:
            best = int(enough[0]) if len(enough) else int(np.argmax(held))
        chosen = np.zeros(groups * lows + 1, dtype=bool)  # per llblock, and a last entry for nodes in none
        chosen[best * lows + order[best]] = True
        return chosen[on_low]


def _fewest_nodes(on_low: np.ndarray, room: np.ndarray, order: np.ndarray, lows: int, groups: int,
                  need: int) -> np.ndarray:
    """Per block, the fewest of its nodes (in its chosen llblocks ``order``) whose ``room``
    adds up to ``need``; a large number where they never do."""
    picked = np.zeros(groups * lows + 1, dtype=bool)
    picked[(np.arange(groups)[:, None] * lows + order).ravel()] = True
    nodes = np.flatnonzero(picked[on_low])
    group = on_low[nodes] // lows
    by = np.lexsort((-room[nodes], group))  # each block's nodes, the roomiest first
    group, held = group[by], np.cumsum(room[nodes][by])
    starts = np.searchsorted(group, np.arange(groups))  # each block's first position
    before = np.where(starts > 0, held[np.maximum(starts - 1, 0)], 0)
    reached = held - before[group] >= need
    out = np.full(groups, len(room) + 1)
    first, at = np.unique(group[reached], return_index=True)
    out[first] = np.flatnonzero(reached)[at] - starts[first] + 1
    return out
