"""A topology as plain data, for ``--json`` output and for people reading it."""

from __future__ import annotations

from dataclasses import asdict

from . import hostlist
from .model import Topology


def as_dict(topo: Topology, free=None) -> dict:
    """Nodes with islands and link classes, the switch tree, bandwidths; ``free`` (a bool
    per GPU) adds each GPU's state."""
    nodes = []
    for ni, n in enumerate(topo.nodes):
        base = int(topo.node_first_gpu[ni])
        entry = {
            "name": n.name,
            "switch": n.switch,
            "gpus": n.num_gpus,
            "islands": [list(isl) for isl in n.islands],
            "links": [[link.name for link in row] for row in n.links],
        }
        if free is not None:
            entry["free"] = [int(g - base) for g in range(base, base + n.num_gpus) if free[g]]
        nodes.append(entry)
    out = {
        "nodes": nodes,
        "switches": dict(sorted(topo.switch_parent.items())),
        "bandwidths_gbps": asdict(topo.bandwidths),
        "gpus": topo.num_gpus,
    }
    if topo.blocks is not None:  # Slurm's block topology: where a job's nodes must lie
        b = topo.blocks
        out["blocks"] = {"blocks": {name: hostlist.compress(m) for name, m in zip(b.names, b.members)},
                         "block_sizes": [b.base_nodes << level for level in b.levels]}
    return out
