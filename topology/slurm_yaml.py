"""Slurm's ``topology.yaml`` (25.05 on) -> the switch tree the daemon plans with.

The file lists named topologies. Where it exists slurmctld ignores topology.conf, and every
partition that names no topology (``Topology=`` in slurm.conf) uses the first one marked
``cluster_default: true``, else the first listed (`interfaces/topology.c`). The daemon plans
the whole cluster with that one, read as topology.conf's switches would be:

* ``tree``: its ``switches`` (``switch``, ``children`` switches, leaf ``nodes``), with the
  same checks as topology.conf (`slurm_conf.switch_tree`);
* ``block``: its ``blocks`` and ``block_sizes``, read as topology.conf's ``BlockName=``
  and ``BlockSizes=`` (`slurm_conf.block_tree`): each block a leaf switch under one root
  named after the topology, and the rule by which slurmctld accepts a job's nodes
  (`blocks.Blocks`), which every plan keeps to;
* ``flat``: one switch, as without any file;
* ``ring`` and ``torus3d``: not modelled, read as flat; the reason says so.

``scontrol show topoconf`` prints the running topologies in this format, each with every
kind's key (``block: {}`` where unused) and ``nodes:`` or ``children:`` left empty: such
empty entries count as absent, so its output reads as the file it came from. Errors name the
file and the line, as for topology.conf.
"""

from __future__ import annotations

from dataclasses import dataclass

import yaml

from .nvsmi import TopologyParseError
from .slurm_conf import SwitchTree, block_tree, switch_tree

#: The topology kinds of topology.yaml(5), each a key of a topology's mapping.
KINDS = ("tree", "block", "flat", "ring", "torus3d")


@dataclass(frozen=True)
class YamlTopology:
    """The topology the daemon plans with: its name and kind, its switches, and what of it
    is not modelled ("" when all is)."""

    name: str
    kind: str
    tree: SwitchTree
    unmodelled: str = ""


def parse_topology_yaml(text: str, *, source: str = "topology.yaml") -> YamlTopology:
    try:
        doc = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        raise TopologyParseError(source, f"not YAML: {getattr(e, 'problem', None) or e}",
                                 line=mark.line + 1 if mark else None) from None
    except RecursionError:  # PyYAML composes nested collections recursively
        raise TopologyParseError(source, "nested too deeply to be a topology") from None
    if not isinstance(doc, (yaml.SequenceNode, yaml.MappingNode)) or not doc.value:
        raise TopologyParseError(source, "expected a list of topologies (- topology: NAME ...)",
                                 line=doc.start_mark.line + 1 if doc is not None else None)
    nodes = _items(doc, source, "the topologies")
    chosen = [_fields(t, source, "a topology") for t in nodes]
    default = next((t for t in chosen if _flag(t.get("cluster_default"))), chosen[0])
    where = nodes[chosen.index(default)]
    name = _text(default.get("topology"), source, "topology", where)
    kinds = [k for k in KINDS if k != "flat" and k in default and not _empty(default[k])]
    flat = default.get("flat")  # true, or its options; topoconf prints flat: {} beside any kind
    if flat is not None and (not kinds or _flag(flat) or isinstance(flat, yaml.MappingNode) and flat.value):
        kinds.append("flat")
    if len(kinds) != 1:
        raise TopologyParseError(source, f"topology {name} must have exactly one of {', '.join(KINDS)}",
                                 line=where.start_mark.line + 1)
    kind = kinds[0]
    body = default[kind]
    # A partition may name another topology (slurm.conf Topology=), which slurmctld then
    # allocates its jobs by; only the default is planned with. A tree or flat one only
    # places them less well; a block one refuses what the plan pins across its blocks.
    others = [_text(t.get("topology"), source, "topology", nodes[i]) for i, t in enumerate(chosen)
              if t is not default and "block" in t and not _empty(t["block"])]
    aside = (f"block topolog{'ies' if len(others) > 1 else 'y'} {', '.join(others)} beside the default: a partition "
             "naming one (Topology=) is planned without its blocks, which slurmctld enforces") if others else ""
    if kind == "tree":
        return YamlTopology(name, kind, _tree(body, source), aside)
    if kind == "block":
        return YamlTopology(name, kind, _blocks(name, body, source), aside)
    if kind == "flat":
        return YamlTopology(name, kind, SwitchTree(), aside)
    return YamlTopology(name, kind, SwitchTree(),
                        "; ".join(filter(None, (f"{kind} topologies are not modelled: planned as one switch", aside))))


def _tree(body: yaml.Node, source: str) -> SwitchTree:
    switches = _items(_fields(body, source, "tree").get("switches"), source, "tree: switches")
    records = []
    for node in switches:
        f = _fields(node, source, "a switch")
        record = {"SwitchName": _text(f.get("switch"), source, "switch", node)}
        for key, name in (("children", "Switches"), ("nodes", "Nodes")):
            if key in f and not _empty(f[key]):
                record[name] = _hostlist(f[key], source, key)
        records.append((node.start_mark.line + 1, record))
    return switch_tree(records, source)


def _blocks(name: str, body: yaml.Node, source: str) -> SwitchTree:
    fields = _fields(body, source, "block")
    blocks = _items(fields.get("blocks"), source, "block: blocks")
    found = []
    for node in blocks:
        f = _fields(node, source, "a block")
        block = _text(f.get("block"), source, "block", node)
        nodes = f.get("nodes")
        found.append((node.start_mark.line + 1, block, None if nodes is None or _empty(nodes) else _hostlist(nodes, source, "nodes", node)))
    sizes_node = fields.get("block_sizes")
    sizes = () if sizes_node is None or _empty(sizes_node) else _sizes(sizes_node, source)
    return block_tree(found, sizes, source, root=name,
                      sizes_line=sizes_node.start_mark.line + 1 if sizes_node is not None else None)


def _sizes(node: yaml.Node, source: str) -> tuple[int, ...]:
    """``block_sizes``: a list of whole numbers (one alone may stand for the list)."""
    items = node.value if isinstance(node, yaml.SequenceNode) else [node]
    out = []
    for item in items:
        text = str(item.value).strip() if isinstance(item, yaml.ScalarNode) else ""
        if not text.isdigit():
            raise TopologyParseError(source, "block_sizes: a list of whole numbers of nodes", line=item.start_mark.line + 1)
        out.append(int(text))
    return tuple(out)


def _empty(node: yaml.Node) -> bool:
    """``{}``, ``[]`` or nothing (``key:`` alone), as topoconf prints what is unset."""
    if isinstance(node, yaml.ScalarNode):
        return node.tag == "tag:yaml.org,2002:null"
    return isinstance(node, (yaml.MappingNode, yaml.SequenceNode)) and not node.value


def _fields(node: yaml.Node | None, source: str, what: str) -> dict[str, yaml.Node]:
    if not isinstance(node, yaml.MappingNode):
        raise TopologyParseError(source, f"{what} must be a mapping of keys",
                                 line=node.start_mark.line + 1 if node is not None else None)
    return {k.value: v for k, v in node.value if isinstance(k, yaml.ScalarNode)}


def _items(node: yaml.Node | None, source: str, what: str) -> list[yaml.Node]:
    """A list's entries; a mapping alone is one entry, as Slurm reads it."""
    if isinstance(node, yaml.MappingNode) and node.value:
        return [node]
    if not isinstance(node, yaml.SequenceNode) or not node.value:
        raise TopologyParseError(source, f"{what} must be a non-empty list",
                                 line=node.start_mark.line + 1 if node is not None else None)
    return list(node.value)


def _text(node: yaml.Node | None, source: str, key: str, parent: yaml.Node | None = None) -> str:
    if not isinstance(node, yaml.ScalarNode) or not str(node.value).strip():
        where = node if node is not None else parent
        raise TopologyParseError(source, f"{key}: a name is required",
                                 line=where.start_mark.line + 1 if where is not None else None)
    return str(node.value).strip()


def _hostlist(node: yaml.Node | None, source: str, key: str, parent: yaml.Node | None = None) -> str:
    """A hostlist string (``node[1-4]``); Slurm takes no YAML list here, and neither do we."""
    if isinstance(node, yaml.SequenceNode):
        raise TopologyParseError(source, f"{key}: a hostlist string such as node[1-4], not a list",
                                 line=node.start_mark.line + 1)
    return _text(node, source, key, parent)


def _flag(node: yaml.Node | None) -> bool:
    """A boolean as Slurm's data_parser reads one (`_convert_data_force_bool`): nothing, false,
    no, off, n, f or 0 is false; any other value true."""
    if node is None or not isinstance(node, yaml.ScalarNode) or node.tag == "tag:yaml.org,2002:null":
        return False
    value = str(node.value).strip().lower()
    if value in ("", "~", "null", "false", "no", "off", "n", "f"):
        return False
    try:
        return float(value) != 0
    except ValueError:
        return True
