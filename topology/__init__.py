"""The cluster model: GPUs, NVLink islands, NUMA sockets, nodes and the switch tree.

It imports nothing else of attentived; every other layer builds on it. The parsers build
it from what a site already has: ``nvidia-smi topo -m`` output, Slurm's gres.conf and
topology.conf, or a TOML cluster file (``hostlist`` expands Slurm host names for them).
"""

from .cluster_file import load_cluster_file, parse_cluster_file
from .model import Bandwidths, Link, Node, Topology
from .nvsmi import TopologyParseError, parse_nvidia_smi_topo
from .shape import uniform
from .slurm_conf import (
    SwitchTree,
    parse_gres_conf,
    parse_topology_conf,
    topology_from_slurm,
)

__all__ = [
    "Bandwidths",
    "Link",
    "Node",
    "SwitchTree",
    "Topology",
    "TopologyParseError",
    "load_cluster_file",
    "parse_cluster_file",
    "parse_gres_conf",
    "parse_nvidia_smi_topo",
    "parse_topology_conf",
    "topology_from_slurm",
    "uniform",
]
