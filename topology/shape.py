"""Quick uniform clusters (``--nodes 8 --gpus-per-node 8``) with sensible islands and racks."""

from __future__ import annotations

from .model import Bandwidths, Node, Topology


def default_islands(gpus_per_node: int) -> int:
    """NVLink islands per node when the operator does not say.

    8-GPU servers without NVSwitch (DGX-1 class, the test cluster) have two NVLink
    islands of 4 on two sockets; smaller servers one island; 16-GPU ones four.
    """
    if gpus_per_node >= 8 and gpus_per_node % 4 == 0:
        return gpus_per_node // 4
    return 1


def uniform(
    nodes: int,
    gpus_per_node: int,
    islands_per_node: int | None = None,
    nodes_per_switch: int = 4,
    bandwidths: Bandwidths | None = None,
) -> Topology:
    """``nodes`` identical servers named ``node1..nodeN``, ``nodes_per_switch`` per leaf
    switch (``sw1``, ``sw2``, ...), all leaves under one ``spine``.

    Each island is its own NUMA socket, so crossing islands costs a SYS hop as on
    two-socket servers.
    """
    if nodes < 1:
        raise ValueError(f"--nodes must be at least 1 (got {nodes})")
    if gpus_per_node < 1:
        raise ValueError(f"--gpus-per-node must be at least 1 (got {gpus_per_node})")
    if nodes_per_switch < 1:
        raise ValueError(f"--nodes-per-switch must be at least 1 (got {nodes_per_switch})")
    k = islands_per_node or default_islands(gpus_per_node)
    if gpus_per_node % k:
        raise ValueError(f"{gpus_per_node} GPUs per node cannot split into {k} equal NVLink islands")
    size = gpus_per_node // k
    groups = [list(range(i * size, (i + 1) * size)) for i in range(k)]
    built = [
        Node.from_groups(f"node{i + 1}", groups, groups, switch=f"sw{i // nodes_per_switch + 1}")
        for i in range(nodes)
    ]
    leaves = sorted({n.switch for n in built})
    parents: dict[str, str | None] = {s: "spine" for s in leaves} if len(leaves) > 1 else {leaves[0]: None}
    if len(leaves) > 1:
        parents["spine"] = None
    return Topology(nodes=tuple(built), switch_parent=parents, bandwidths=bandwidths or Bandwidths())
