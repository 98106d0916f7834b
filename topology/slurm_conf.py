"""Slurm's own files -> ``Topology``: ``gres.conf`` for GPUs and NVLinks, ``topology.conf``
for the switch tree.

A site that already runs Slurm has described its cluster there, so the daemon can start
without a separate cluster file. ``Links=`` in gres.conf is the only place Slurm records
NVLink topology (no Slurm command prints it), and ``Cores=`` tells which GPUs share a
CPU socket. Both files are ``Key=Value`` lines with case-insensitive keys and ``#``
comments; node and device lists are Slurm hostlists.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace

from . import hostlist
from .blocks import Blocks
from .model import Bandwidths, Link, Node, Topology
from .nvsmi import MAX_GPUS_PER_NODE, TopologyParseError
from .shape import uniform

_GRES_KEYS = ("NodeName", "Name", "Type", "File", "Cores", "Links", "Count", "Flags", "AutoDetect")
_TOPOLOGY_KEYS = ("SwitchName", "Nodes", "Switches", "LinkSpeed", "BlockName", "BlockSizes")
_INTERVAL = re.compile(r"([0-9]+)(?:-([0-9]+))?")

#: Inclusive core-id intervals from ``Cores=``; kept as intervals so a huge range costs nothing.
_CoreRanges = tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class _GresGpu:
    """One GPU as gres.conf declares it, before it is placed in its node's matrix."""

    node: str
    device: str | None  # File= path; None for GPUs only counted with Count=
    cores: _CoreRanges | None
    links: tuple[int, ...] | None
    line: int
    type: str = ""  # Type= (the gres type jobs ask for, gpu:h100)

    def label(self) -> str:
        return self.device or f"the Count= GPU of line {self.line}"


@dataclass(frozen=True)
class SwitchTree:
    """What topology.conf says: each node's leaf switch and each switch's parent.

    ``parent`` holds every defined switch (``None`` for roots); ``line_of`` is each
    switch's defining line, so later errors about its nodes can point there. A block
    topology (`block_tree`) is a tree too, each block a leaf switch, with ``blocks`` set.
    """

    leaf_of: dict[str, str] = field(default_factory=dict)
    parent: dict[str, str | None] = field(default_factory=dict)
    link_speed: dict[str, int] = field(default_factory=dict)
    line_of: dict[str, int] = field(default_factory=dict)
    blocks: Blocks | None = None


def parse_gres_conf(
    text: str,
    *,
    source: str = "gres.conf",
    nvlink_gbps_per_link: float = 25.0,
    default_nodes: Sequence[str] = (),
) -> dict[str, Node]:
    """Per node (natural order), a ``Node`` whose matrix comes from ``Links=`` and ``Cores=``,
    and whose ``gpu_type`` is its GPUs' ``Type=`` when they all share one.

    Only ``Name=gpu`` lines count (mps, shard and NIC gres are skipped), as do
    ``AutoDetect`` lines. A node's GPUs are numbered in ``File=`` order, which is the order
    ``Links=`` positions refer to. Links ``n > 0`` is NVLink at ``n * nvlink_gbps_per_link``
    GB/s; ``0`` is PCIe through the host bridge if the two GPUs' ``Cores=`` overlap (or
    either lacks ``Cores=``), else a cross-socket hop. GPUs without ``Links=`` anywhere on
    their node are all ``0``. Lines without ``NodeName=`` apply to ``default_nodes``.
    Nodes come back on switch ``sw0``.
    """
    if not nvlink_gbps_per_link > 0:
        raise ValueError(f"nvlink_gbps_per_link must be positive, got {nvlink_gbps_per_link}")
    gpus: dict[str, list[_GresGpu]] = {}
    for number, record in _records(text, source, _GRES_KEYS):
        for gpu in _gres_line(record, number, source, default_nodes):
            gpus.setdefault(gpu.node, []).append(gpu)
    return {
        name: _gres_node(name, gpus[name], source, nvlink_gbps_per_link)
        for name in sorted(gpus, key=hostlist.natural_key)
    }


def parse_topology_conf(text: str, *, source: str = "topology.conf") -> SwitchTree:
    """Read ``SwitchName=... Nodes=... | Switches=... [LinkSpeed=...]`` lines (topology/tree),
    or ``BlockName=... Nodes=...`` lines and a ``BlockSizes=`` line (topology/block).

    Rejects switches defined twice, nodes or switches with two parents, undefined child
    switches and cycles: Slurm refuses such a file too, but with a less precise message.
    """
    records = list(_records(text, source, _TOPOLOGY_KEYS))
    if any("BlockName" in r or "BlockSizes" in r for _, r in records):
        return _block_conf(records, source)
    return switch_tree(records, source)


#: The root above a topology.conf's blocks: no hostlist makes a block of that name.
BLOCKS_ROOT = "(blocks)"


def _block_conf(records: list[tuple[int, dict[str, str]]], source: str) -> SwitchTree:
    """A topology/block topology.conf: its blocks in order and its ``BlockSizes``, read as
    slurmctld reads them: ``BlockSizes=`` anywhere (on a block's line too; the last one
    wins), each size by ``atoi`` (its leading digits)."""
    blocks: list[tuple[int, str, str | None]] = []
    sizes: tuple[int, ...] = ()
    sizes_line: int | None = None
    for number, record in records:
        if "BlockSizes" in record:
            sizes = tuple(_atoi(v) for v in record["BlockSizes"].split(","))
            sizes_line = number
        if "BlockName" in record:
            other = sorted(set(record) - {"BlockName", "Nodes", "BlockSizes"})
            if other:
                raise TopologyParseError(source, f"{other[0]}= is not a key of a block (BlockName=, Nodes=)", line=number)
            blocks.append((number, record["BlockName"], record.get("Nodes")))
        elif "BlockSizes" not in record:
            raise TopologyParseError(
                source, "a topology.conf of blocks (BlockName=) cannot describe switches (SwitchName=) too", line=number)
    if not blocks:
        raise TopologyParseError(source, "BlockSizes= but no BlockName= line", line=sizes_line)
    return block_tree(blocks, sizes, source, root=BLOCKS_ROOT, sizes_line=sizes_line)


def _atoi(text: str) -> int:
    """C's ``atoi``, as slurmctld reads a BlockSizes value: leading digits, else 0."""
    digits = re.match(r"\s*([+-]?[0-9]+)", text)
    return int(digits.group(1)) if digits else 0


def block_tree(blocks: Sequence[tuple[int, str, str | None]], sizes: Sequence[int], source: str, *,
               root: str, sizes_line: int | None = None) -> SwitchTree:
    """Blocks (line, name, nodes' hostlist or ``None``), in Slurm's order, as leaf switches
    under ``root``, with the `Blocks` slurmctld allocates by (``sizes``: ``BlockSizes``).
    slurmctld lets blocks share nodes (it ORs their bitmaps); such a node hangs from the
    first block's switch, as it is counted in the first block (`Topology.node_block`)."""
    members: dict[str, list[str]] = {}
    records = []
    placed: set[str] = set()
    for number, name, nodes in blocks:
        if name in members:
            raise TopologyParseError(source, f"block {name} is defined twice", line=number)
        members[name] = _hosts(nodes, "Nodes", source, number) if nodes else []
        own = [n for n in members[name] if n not in placed]
        placed.update(own)
        records.append((number, {"SwitchName": name, **({"Nodes": ",".join(own)} if own else {})}))
    if root in members:
        root = f"({root})"  # a block named as its topology (topology.yaml): the root steps aside
    root_record = {"SwitchName": root, "Switches": ",".join(members)}
    tree = switch_tree([*records, (blocks[0][0], root_record)], source)
    try:
        found = Blocks.of(list(members), list(members.values()), sizes)
    except ValueError as e:
        raise TopologyParseError(source, str(e), line=sizes_line or blocks[0][0]) from None
    return replace(tree, blocks=found)


def switch_tree(records: Iterable[tuple[int, dict[str, str]]], source: str) -> SwitchTree:
    """The tree of ``SwitchName=`` records (line number, keys), from topology.conf or
    topology.yaml (`slurm_yaml`), with parse_topology_conf's checks."""
    tree = SwitchTree()
    children: dict[str, tuple[str, int]] = {}  # child switch -> (parent, line)
    for number, record in records:
        _switch_line(record, number, source, tree, children)
    for child, (parent, number) in children.items():
        if child not in tree.line_of:
            raise TopologyParseError(
                source, f"switch {parent} lists switch {child}, which has no SwitchName={child} line", line=number
            )
        tree.parent[child] = parent
    _check_acyclic(tree, source)
    return tree


def topology_from_slurm(
    gres_text: str,
    topology_text: str | SwitchTree | None = None,
    gpus_per_node: Mapping[str, int] | None = None,
    bandwidths: Bandwidths | None = None,
    *,
    nvlink_gbps_per_link: float = 25.0,
    gres_source: str = "gres.conf",
    topology_source: str = "topology.conf",
) -> Topology:
    """A ``Topology`` from gres.conf (and topology.conf's text, or a switch tree read from
    topology.yaml by `slurm_yaml`): nodes in natural order.

    A node in topology.conf without ``Name=gpu`` lines takes its GPU count from
    ``gpus_per_node`` (keys may be hostlists) and the islands of the quick uniform shape
    (``shape.uniform``); without an entry there it is an error. Nodes topology.conf does
    not place hang from leaf switch ``sw0``.
    """
    if isinstance(topology_text, SwitchTree):
        tree = topology_text
    elif topology_text is not None:
        tree = parse_topology_conf(topology_text, source=topology_source)
    else:
        tree = SwitchTree()
    counts = _expand_counts(gpus_per_node or {})
    nodes = parse_gres_conf(
        gres_text,
        source=gres_source,
        nvlink_gbps_per_link=nvlink_gbps_per_link,
        default_nodes=sorted(tree.leaf_of, key=hostlist.natural_key),
    )
    for name, leaf in tree.leaf_of.items():
        if name not in nodes:
            if name not in counts:
                raise TopologyParseError(
                    topology_source,
                    f"node {name} (switch {leaf}) has no Name=gpu lines in {gres_source} and no gpus_per_node entry",
                    line=tree.line_of[leaf],
                )
            nodes[name] = replace(uniform(1, counts[name]).nodes[0], name=name)
    for name, count in counts.items():
        if name not in nodes:
            raise ValueError(f"gpus_per_node names {name}, which neither {gres_source} nor {topology_source} lists")
        if nodes[name].num_gpus != count:
            raise ValueError(
                f"gpus_per_node gives {name} {count} GPUs but {gres_source} declares {nodes[name].num_gpus}"
            )
    if not nodes:
        raise TopologyParseError(gres_source, "no Name=gpu lines and no topology.conf nodes: the cluster has no GPUs")
    built = tuple(
        replace(nodes[name], switch=tree.leaf_of.get(name, "sw0")) for name in sorted(nodes, key=hostlist.natural_key)
    )
    parents = dict(tree.parent)
    if any(node.switch == "sw0" for node in built):
        parents.setdefault("sw0", None)
    return Topology(nodes=built, switch_parent=parents, bandwidths=bandwidths or Bandwidths(), blocks=tree.blocks)


# ---- shared line reader ----


def _records(text: str, source: str, keys: tuple[str, ...]) -> Iterator[tuple[int, dict[str, str]]]:
    """Non-blank lines as ``{canonical key: value}``, comments stripped, keys checked."""
    canonical = {k.lower(): k for k in keys}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        record: dict[str, str] = {}
        for token in line.split():
            key, sep, value = token.partition("=")
            if not sep or not key:
                raise TopologyParseError(source, f"expected Key=Value, found {token!r}", line=number)
            name = canonical.get(key.lower())
            if name is None:
                raise TopologyParseError(source, f"unknown key {key!r}; expected one of {', '.join(keys)}", line=number)
            if name in record:
                raise TopologyParseError(source, f"{name}= appears twice on one line", line=number)
            if not value:
                raise TopologyParseError(source, f"{name}= has no value", line=number)
            record[name] = value
        yield number, record


def _hosts(value: str, key: str, source: str, number: int) -> list[str]:
    try:
        return hostlist.expand(value)
    except ValueError as e:
        raise TopologyParseError(source, f"{key}=: {e}", line=number) from e


def _int(value: str, key: str, source: str, number: int) -> int:
    if not re.fullmatch(r"-?[0-9]+", value):
        raise TopologyParseError(source, f"{key}= must be a whole number, found {value!r}", line=number)
    return int(value)


# ---- gres.conf ----


def _gres_line(record: dict[str, str], number: int, source: str, default_nodes: Sequence[str]) -> list[_GresGpu]:
    """The GPUs one gres.conf line declares (one per node and device file)."""
    if "Name" not in record:
        if "AutoDetect" in record:
            return []
        raise TopologyParseError(source, "missing Name= (e.g. Name=gpu)", line=number)
    if record["Name"].lower() != "gpu":
        return []
    if "NodeName" in record:
        nodes = _hosts(record["NodeName"], "NodeName", source, number)
    elif default_nodes:
        nodes = list(default_nodes)
    else:
        raise TopologyParseError(source, "no NodeName=: say which nodes this line describes", line=number)
    devices: list[str | None] = list(_hosts(record["File"], "File", source, number)) if "File" in record else []
    count = _gres_count(record, len(devices), source, number)
    if count > MAX_GPUS_PER_NODE:
        raise TopologyParseError(source, f"{count} GPUs on one line; at most {MAX_GPUS_PER_NODE} per node", line=number)
    devices += [None] * (count - len(devices))
    links = _links(record["Links"], source, number) if "Links" in record else None
    if links is not None and (len(devices) != 1 or devices[0] is None):
        raise TopologyParseError(source, "Links= describes one GPU: give exactly one device in File=", line=number)
    cores = _cores(record["Cores"], source, number) if "Cores" in record else None
    gpu_type = record.get("Type", "")
    return [_GresGpu(node, device, cores, links, number, gpu_type) for node in nodes for device in devices]


def _gres_count(record: dict[str, str], files: int, source: str, number: int) -> int:
    """GPUs on the line: the File= devices, else Count= (Slurm's default is 1)."""
    if "Count" not in record:
        return files or 1
    count = _int(record["Count"], "Count", source, number)
    if count < 1:
        raise TopologyParseError(source, f"Count= must be at least 1, found {count}", line=number)
    if files and count != files:
        raise TopologyParseError(source, f"Count={count} but File= names {files} devices", line=number)
    return count


def _links(value: str, source: str, number: int) -> tuple[int, ...]:
    links = tuple(_int(v, "Links", source, number) for v in value.split(","))
    if any(n < -1 for n in links):
        raise TopologyParseError(
            source, "Links= values are -1 (the GPU itself), 0 (no NVLink) or an NVLink count", line=number
        )
    return links


def _cores(value: str, source: str, number: int) -> _CoreRanges:
    intervals = []
    for item in value.strip("[]").split(","):
        m = _INTERVAL.fullmatch(item)
        if m is None:
            raise TopologyParseError(source, f"Cores=: bad range {item!r} (expected N or N-M)", line=number)
        lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
        if hi < lo:
            raise TopologyParseError(source, f"Cores=: reversed range {item!r}", line=number)
        intervals.append((lo, hi))
    return tuple(intervals)


def _gres_node(name: str, gpus: list[_GresGpu], source: str, per_link: float) -> Node:
    """One node's matrix from its GPUs' Links= (symmetric, -1 on the diagonal) and Cores=."""
    gpus = _device_order(name, gpus, source)
    n = len(gpus)
    if n > MAX_GPUS_PER_NODE:
        raise TopologyParseError(
            source,
            f"node {name} has {n} GPUs; at most {MAX_GPUS_PER_NODE} are supported",
            line=max(g.line for g in gpus),
        )
    with_links = [g for g in gpus if g.links is not None]
    if with_links and len(with_links) < n:
        missing = next(g for g in gpus if g.links is None)
        raise TopologyParseError(
            source,
            f"node {name}: {missing.label()} has no Links= but other GPUs of the node do; give Links= on all or none",
            line=missing.line,
        )
    counts = [g.links or (0,) * n for g in gpus]
    if with_links:
        for i in range(n):
            _check_links(name, gpus, i, counts, source)
    links = tuple(tuple(_gres_link(gpus, counts, i, j) for j in range(n)) for i in range(n))
    nvlink_bw = None
    if any(c > 0 for row in counts for c in row):
        nvlink_bw = tuple(tuple(max(c, 0) * per_link for c in row) for row in counts)
    types = {g.type for g in gpus}
    gpu_type = types.pop() if len(types) == 1 else ""  # a node of mixed types has no one type
    return Node(name=name, links=links, nvlink_bw=nvlink_bw, gpu_type=gpu_type)


def _device_order(name: str, gpus: list[_GresGpu], source: str) -> list[_GresGpu]:
    """GPUs in device-file order (the order Links= positions use), Count= GPUs last."""
    seen: dict[str, int] = {}
    for gpu in gpus:
        if gpu.device is not None:
            if gpu.device in seen:
                raise TopologyParseError(
                    source, f"node {name}: {gpu.device} is already declared on line {seen[gpu.device]}", line=gpu.line
                )
            seen[gpu.device] = gpu.line
    files = sorted((g for g in gpus if g.device is not None), key=lambda g: hostlist.natural_key(g.device or ""))
    return files + [g for g in gpus if g.device is None]


def _check_links(name: str, gpus: list[_GresGpu], i: int, counts: list[tuple[int, ...]], source: str) -> None:
    gpu, row, n = gpus[i], counts[i], len(gpus)
    if len(row) != n:
        raise TopologyParseError(
            source,
            f"node {name}: Links= of {gpu.label()} has {len(row)} entries but the node has {n} GPUs "
            f"(one per GPU, in File= order)",
            line=gpu.line,
        )
    for j, value in enumerate(row):
        if (value == -1) != (i == j):
            raise TopologyParseError(
                source,
                f"node {name}: Links= of {gpu.label()} (GPU {i}) has {value} at position {j}; "
                f"-1 belongs at position {i} only",
                line=gpu.line,
            )
        if j < i and value != counts[j][i]:
            raise TopologyParseError(
                source,
                f"node {name}: GPU {i} ({gpu.label()}) has {value} NVLinks to GPU {j} "
                f"but GPU {j} ({gpus[j].label()}, line {gpus[j].line}) has {counts[j][i]} back",
                line=gpu.line,
            )


def _gres_link(gpus: list[_GresGpu], counts: list[tuple[int, ...]], i: int, j: int) -> Link:
    if i == j:
        return Link.SELF
    if counts[i][j] > 0:
        return Link.NVLINK
    a, b = gpus[i].cores, gpus[j].cores
    if a is None or b is None or any(lo1 <= hi2 and lo2 <= hi1 for lo1, hi1 in a for lo2, hi2 in b):
        return Link.PCIE_HOST
    return Link.SOCKET


# ---- topology.conf ----


def _switch_line(
    record: dict[str, str], number: int, source: str, tree: SwitchTree, children: dict[str, tuple[str, int]]
) -> None:
    """Record one SwitchName= line in ``tree`` (nodes, speed) and ``children`` (switches)."""
    if "SwitchName" not in record:
        raise TopologyParseError(source, "missing SwitchName=", line=number)
    switch = record["SwitchName"]
    if switch in tree.line_of:
        raise TopologyParseError(
            source, f"switch {switch} is already defined on line {tree.line_of[switch]}", line=number
        )
    tree.line_of[switch] = number
    tree.parent[switch] = None
    if "LinkSpeed" in record:
        speed = _int(record["LinkSpeed"], "LinkSpeed", source, number)
        if speed < 1:
            raise TopologyParseError(source, f"LinkSpeed= must be positive, found {speed}", line=number)
        tree.link_speed[switch] = speed
    for node in _hosts(record["Nodes"], "Nodes", source, number) if "Nodes" in record else []:
        if node in tree.leaf_of:
            other = tree.leaf_of[node]
            raise TopologyParseError(
                source, f"node {node} is under switch {other} (line {tree.line_of[other]}) and {switch}", line=number
            )
        tree.leaf_of[node] = switch
    for child in _hosts(record["Switches"], "Switches", source, number) if "Switches" in record else []:
        if child == switch:
            raise TopologyParseError(source, f"switch {switch} lists itself in Switches=", line=number)
        if child in children:
            raise TopologyParseError(
                source,
                f"switch {child} is under {children[child][0]} (line {children[child][1]}) and {switch}",
                line=number,
            )
        children[child] = (switch, number)


def _check_acyclic(tree: SwitchTree, source: str) -> None:
    for start in tree.parent:
        seen = {start}
        up = tree.parent[start]
        while up is not None:
            if up in seen:
                raise TopologyParseError(
                    source, f"switch {start} is its own ancestor (a loop in Switches=)", line=tree.line_of[start]
                )
            seen.add(up)
            up = tree.parent[up]


def _expand_counts(gpus_per_node: Mapping[str, int]) -> dict[str, int]:
    """``gpus_per_node`` with hostlist keys expanded (``{"node[5-6]": 8}``)."""
    out: dict[str, int] = {}
    for key, count in gpus_per_node.items():
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_GPUS_PER_NODE:
            raise ValueError(
                f"gpus_per_node[{key!r}] must be a whole number from 1 to {MAX_GPUS_PER_NODE}, got {count!r}"
            )
        for name in hostlist.expand(key):
            out[name] = count
    return out
