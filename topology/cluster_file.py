"""A TOML cluster file -> ``Topology``: the operator's own description of the cluster.

Slurm's files say little about NVLink (only ``Links=``, often absent), so sites describe
node types here, either by their NVLink islands and sockets or by pasting the driver's
``nvidia-smi topo -m`` output. Full reference: ``docs/cluster-file.md``.

Format::

    [bandwidths]                  # optional; GB/s per link class (fields of Bandwidths)
    nvlink = 150.0                #   nvlink, pcie_switch, pcie_host, socket, network, spine

    [[nodes]]                     # one table per node type; at least one
    names = "node[1-4]"           # Slurm hostlist (required)
    switch = "sw1"                # leaf switch (optional, default "sw0")
    gpus = 8                      # GPUs per node (optional when islands is given)
    islands = [[0,1,2,3],[4,5,6,7]]  # NVLink islands (optional; default as --gpus-per-node)
    sockets = [[0,1,2,3],[4,5,6,7]]  # NUMA sockets (optional; default: one per island)

    [[nodes]]
    names = "dgx[01-02]"
    nvidia_smi_topo = "dgx.txt"   # instead of gpus/islands/sockets; relative to this file
    nvlink_gbps_per_link = 25.0   # optional, GB/s per bonded NVLink in NV# cells
    cpus = 128                    # optional, any node table: CPUs per node (Slurm CPUs=)
    mem_mb = 1024000              # optional: memory per node in MB (Slurm RealMemory=)
    gpu_type = "a100"             # optional: the gres type jobs ask for (--gres=gpu:a100:2)
    features = ["ib", "nvme"]     # optional: node features (Slurm Features=; or "ib,nvme")

    [switches]                    # optional; parent of each switch, roots omitted
    sw1 = "spine"

    block_sizes = [2, 4]          # optional: Slurm's topology/block (BlockSizes; top level)
    [[blocks]]                    # optional, in Slurm's order: where a job's nodes must lie
    name = "b1"
    nodes = "node[1-2]"

``cpus``, ``mem_mb``, ``gpu_type`` and ``features`` say what Slurm checks besides GPUs
before it starts a job on the node (the simulator then enforces jobs' CPU, memory, GPU
type, feature and ``--exclusive`` requests); left out, they are unknown and unchecked.

Nodes get dense GPU ids in natural name order (``node2`` before ``node10``), whatever the
order of the tables, so ids match Slurm's node order. Errors name the file and the key:
``cluster.toml: nodes[1].islands: GPU 3 appears twice`` (``nodes[0]`` is the first table).
"""

from __future__ import annotations

import math
import os
import re
import tomllib
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

from . import hostlist
from .blocks import Blocks
from .model import Bandwidths, Node, Topology
from .nvsmi import MAX_GPUS_PER_NODE, TopologyParseError, parse_nvidia_smi_topo
from .shape import uniform

_TOP_KEYS = ("bandwidths", "nodes", "switches", "blocks", "block_sizes")
_NODE_KEYS = (
    "names", "switch", "gpus", "islands", "sockets", "nvidia_smi_topo", "nvlink_gbps_per_link",
    "cpus", "mem_mb", "gpu_type", "features",
)  # fmt: skip
_TOKEN = re.compile(r"[^\s,&|:!*\[\]()]+")  # a GPU type or feature name as Slurm reads one
_SHAPE_KEYS = ("gpus", "islands", "sockets")
_BANDWIDTH_KEYS = tuple(f.name for f in fields(Bandwidths))


def load_cluster_file(path: str | os.PathLike[str]) -> Topology:
    """Read a cluster TOML file; ``nvidia_smi_topo`` paths are relative to its folder."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise TopologyParseError(str(path), f"cannot read the cluster file: {e}") from e
    return parse_cluster_file(text, source=str(path), base_dir=path.parent)


def parse_cluster_file(text: str, *, source: str = "cluster.toml", base_dir: str | os.PathLike[str] = ".") -> Topology:
    """Build a ``Topology`` from cluster TOML text; ``source`` names it in error messages."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise TopologyParseError(source, f"not valid TOML: {e}") from e
    _known_keys(data, _TOP_KEYS, source, "")
    bandwidths = _bandwidths(data.get("bandwidths", {}), source)
    nodes = _nodes(data.get("nodes"), source, Path(base_dir))
    parents = _switch_parents(data.get("switches", {}), nodes, source)
    return Topology(nodes=nodes, switch_parent=parents, bandwidths=bandwidths, blocks=_blocks(data, nodes, source))


# ---- sections ----


def _bandwidths(table: Any, source: str) -> Bandwidths:
    _require(table, dict, source, "bandwidths")
    _known_keys(table, _BANDWIDTH_KEYS, source, "bandwidths.")
    return Bandwidths(**{key: _positive(value, source, f"bandwidths.{key}") for key, value in table.items()})


def _nodes(tables: Any, source: str, base_dir: Path) -> tuple[Node, ...]:
    """All nodes of all ``[[nodes]]`` tables, in natural name order."""
    if not isinstance(tables, list) or not tables:
        raise TopologyParseError(source, "at least one [[nodes]] table is required", key="nodes")
    defined: dict[str, int] = {}
    built: list[Node] = []
    for index, table in enumerate(tables):
        key = f"nodes[{index}]"
        _require(table, dict, source, key)
        _known_keys(table, _NODE_KEYS, source, f"{key}.")
        names = _names(table, source, key)
        for name in names:
            if name in defined:
                raise TopologyParseError(source, f"{name} is already in nodes[{defined[name]}]", key=f"{key}.names")
            defined[name] = index
        template = _node_template(table, source, key, base_dir)
        switch = _string(table.get("switch", "sw0"), source, f"{key}.switch")
        extra = _resources(table, source, key)
        built += [replace(template, name=name, switch=switch, **extra) for name in names]
    return tuple(sorted(built, key=lambda node: hostlist.natural_key(node.name)))


def _resources(table: dict[str, Any], source: str, key: str) -> dict[str, Any]:
    """``cpus``, ``mem_mb``, ``gpu_type`` and ``features`` of a table, those it gives."""
    out: dict[str, Any] = {}
    for name in ("cpus", "mem_mb"):
        if name in table:
            value = table[name]
            if not _is_int(value) or value < 1:
                raise TopologyParseError(source, f"must be a whole number of at least 1, got {value!r}", key=f"{key}.{name}")
            out[name] = value
    if "gpu_type" in table:
        out["gpu_type"] = _token(table["gpu_type"], source, f"{key}.gpu_type")
    if "features" in table:
        value = table["features"]
        if isinstance(value, str):
            value = value.split(",")
        if not isinstance(value, list):
            raise TopologyParseError(
                source, f'must be an array of names or a comma-separated string, got {value!r}', key=f"{key}.features"
            )
        out["features"] = tuple(dict.fromkeys(_token(f, source, f"{key}.features") for f in value))
    return out


def _names(table: dict[str, Any], source: str, key: str) -> list[str]:
    if "names" not in table:
        raise TopologyParseError(source, 'missing; give a Slurm hostlist such as "node[1-4]"', key=f"{key}.names")
    spec = _string(table["names"], source, f"{key}.names")
    try:
        return hostlist.expand(spec)
    except ValueError as e:
        raise TopologyParseError(source, str(e), key=f"{key}.names") from e


def _node_template(table: dict[str, Any], source: str, key: str, base_dir: Path) -> Node:
    """The node type a table describes (named and switched later, once per host)."""
    if "nvidia_smi_topo" in table:
        clash = [k for k in _SHAPE_KEYS if k in table]
        if clash:
            raise TopologyParseError(
                source, f"give either nvidia_smi_topo or {'/'.join(_SHAPE_KEYS)}, not both", key=f"{key}.{clash[0]}"
            )
        return _from_nvidia_smi(table, source, key, base_dir)
    if "nvlink_gbps_per_link" in table:
        raise TopologyParseError(source, "only applies with nvidia_smi_topo", key=f"{key}.nvlink_gbps_per_link")
    return _from_groups(table, source, key)


def _from_nvidia_smi(table: dict[str, Any], source: str, key: str, base_dir: Path) -> Node:
    relative = _string(table["nvidia_smi_topo"], source, f"{key}.nvidia_smi_topo")
    path = base_dir / relative
    per_link = _positive(table.get("nvlink_gbps_per_link", 25.0), source, f"{key}.nvlink_gbps_per_link")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise TopologyParseError(source, f"cannot read {path}: {e}", key=f"{key}.nvidia_smi_topo") from e
    return parse_nvidia_smi_topo(text, nvlink_gbps_per_link=per_link, source=str(path))


def _from_groups(table: dict[str, Any], source: str, key: str) -> Node:
    """A node from ``gpus`` / ``islands`` / ``sockets``, defaults as in ``shape.uniform``."""
    gpus: int | None = None
    if "gpus" in table:
        gpus = table["gpus"]
        if not _is_int(gpus) or not 1 <= gpus <= MAX_GPUS_PER_NODE:
            raise TopologyParseError(
                source, f"must be a whole number from 1 to {MAX_GPUS_PER_NODE}, got {gpus!r}", key=f"{key}.gpus"
            )
    elif "islands" not in table:
        raise TopologyParseError(source, "missing; give gpus, islands or nvidia_smi_topo", key=f"{key}.gpus")
    if "islands" in table:
        islands = _groups(table["islands"], gpus, source, f"{key}.islands")
        gpus = sum(len(group) for group in islands)
    else:
        assert gpus is not None  # without islands, gpus was required above
        islands = [list(group) for group in uniform(1, gpus).nodes[0].islands]
    sockets = _groups(table["sockets"], gpus, source, f"{key}.sockets") if "sockets" in table else islands
    return Node.from_groups("template", islands, sockets)


def _groups(value: Any, gpus: int | None, source: str, key: str) -> list[list[int]]:
    """GPU groups (islands or sockets) that must cover GPUs ``0..gpus-1`` exactly once."""
    _require(value, list, source, key)
    if not value:
        raise TopologyParseError(source, "needs at least one group, e.g. [[0,1,2,3]]", key=key)
    seen: set[int] = set()
    for index, group in enumerate(value):
        if not isinstance(group, list) or not group or not all(_is_int(g) for g in group):
            raise TopologyParseError(source, f"group {index} must be a non-empty array of GPU numbers", key=key)
        for gpu in group:
            if gpu in seen:
                raise TopologyParseError(source, f"GPU {gpu} appears twice", key=key)
            seen.add(gpu)
    count = gpus if gpus is not None else len(seen)
    if count > MAX_GPUS_PER_NODE:
        raise TopologyParseError(
            source, f"{count} GPUs in one node; at most {MAX_GPUS_PER_NODE} are supported", key=key
        )
    for gpu in sorted(seen):
        if not 0 <= gpu < count:
            raise TopologyParseError(source, f"GPU {gpu} is out of range: the node has GPUs 0..{count - 1}", key=key)
    missing = sorted(set(range(count)) - seen)
    if missing:
        raise TopologyParseError(
            source, f"GPU {missing[0]} is in no group (every GPU 0..{count - 1} needs one)", key=key
        )
    return value


def _switch_parents(table: Any, nodes: tuple[Node, ...], source: str) -> dict[str, str | None]:
    """Every switch (leaves included) -> its parent, ``None`` for roots; loops rejected."""
    _require(table, dict, source, "switches")
    parents: dict[str, str | None] = {node.switch: None for node in nodes}
    for child, parent in table.items():
        parent = _string(parent, source, f"switches.{child}")
        if parent == child:
            raise TopologyParseError(source, "a switch cannot be its own parent", key=f"switches.{child}")
        parents[child] = parent
        parents.setdefault(parent, None)
    for start in table:
        seen, up = {start}, parents[start]
        while up is not None:
            if up in seen:
                raise TopologyParseError(source, f"loop: {start} is its own ancestor", key=f"switches.{start}")
            seen.add(up)
            up = parents[up]
    return parents


# ---- value checks ----


def _blocks(data: dict[str, Any], nodes: tuple[Node, ...], source: str) -> Blocks | None:
    """``[[blocks]]`` (``name``, ``nodes``) and ``block_sizes``, as topology.conf's
    ``BlockName=``/``BlockSizes=`` (`blocks.Blocks`): the cluster's nodes only, each in one."""
    if "blocks" not in data:
        if "block_sizes" in data:
            raise TopologyParseError(source, "block_sizes without [[blocks]] tables", key="block_sizes")
        return None
    tables = data["blocks"]
    if not isinstance(tables, list) or not tables:
        raise TopologyParseError(source, "must be [[blocks]] tables (name, nodes)", key="blocks")
    known = {n.name for n in nodes}
    names: list[str] = []
    members: list[list[str]] = []
    placed: dict[str, str] = {}
    for index, table in enumerate(tables):
        key = f"blocks[{index}]"
        _require(table, dict, source, key)
        _known_keys(table, ("name", "nodes"), source, f"{key}.")
        name = _string(table.get("name"), source, f"{key}.name")
        spec = _string(table.get("nodes"), source, f"{key}.nodes")
        try:
            listed = hostlist.expand(spec)
        except ValueError as e:
            raise TopologyParseError(source, str(e), key=f"{key}.nodes") from e
        for node in listed:
            if node not in known:
                raise TopologyParseError(source, f"{node} is not a node of this file", key=f"{key}.nodes")
            if node in placed:
                raise TopologyParseError(source, f"{node} is already in block {placed[node]}", key=f"{key}.nodes")
            placed[node] = name
        names.append(name)
        members.append(listed)
    sizes = data.get("block_sizes", [])
    if not isinstance(sizes, list) or not all(_is_int(v) for v in sizes):
        raise TopologyParseError(source, f"must be an array of whole numbers of nodes, got {sizes!r}", key="block_sizes")
    try:
        return Blocks.of(names, members, sizes)
    except ValueError as e:
        raise TopologyParseError(source, str(e), key="block_sizes" if sizes else "blocks") from None


def _known_keys(table: dict[str, Any], allowed: tuple[str, ...], source: str, prefix: str) -> None:
    for key in table:
        if key not in allowed:
            raise TopologyParseError(source, f"unknown key; expected one of {', '.join(allowed)}", key=f"{prefix}{key}")


def _require(value: Any, kind: type, source: str, key: str) -> None:
    if not isinstance(value, kind):
        what = {dict: "a table", list: "an array"}[kind]  # type: ignore[index]  # kind is dict or list
        raise TopologyParseError(source, f"must be {what}, got {value!r}", key=key)


def _string(value: Any, source: str, key: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise TopologyParseError(source, f"must be a non-empty string, got {value!r}", key=key)
    return value


def _token(value: Any, source: str, key: str) -> str:
    """A GPU type or feature name: no spaces, commas or constraint operators (& | ! * [ ])."""
    if not isinstance(value, str) or _TOKEN.fullmatch(value.strip()) is None:
        raise TopologyParseError(
            source, f"must be a name without spaces, commas or any of & | : ! * [ ] ( ), got {value!r}", key=key
        )
    return value.strip()


def _positive(value: Any, source: str, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        raise TopologyParseError(source, f"must be a positive number (GB/s), got {value!r}", key=key)
    return float(value)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
