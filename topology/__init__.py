"""The cluster model: GPUs, NVLink islands, NUMA sockets, nodes and the switch tree.

It imports nothing else of attentived; every other layer builds on it.
"""

from .model import Bandwidths, Link, Node, Topology
from .shape import uniform

__all__ = ["Bandwidths", "Link", "Node", "Topology", "uniform"]
