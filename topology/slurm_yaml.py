"""Slurm's ``topology.yaml`` (25.05 on) -> the switch tree the daemon plans with.

The file lists named topologies. Where it exists slurmctld ignores topology.conf, and every
partition that names no topology (``Topology=`` in slurm.conf) uses the first one marked
``cluster_default: true``, else the first listed (`interfaces/topology.c`). The daemon plans
the whole cluster with that one, read as topology.conf's switches would be:

* ``tree``: its ``switches`` (``switch``, ``children`` switches, leaf ``nodes``), with the
  same checks as topology.conf (`slurm_conf.switch_tree`);
* ``block``: each block a leaf switch under one root named after the topology: a job
  inside one block stays on its fast links, one across blocks does not;
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
from .slurm_conf import SwitchTree, switch_tree

#: The topology kinds of topology.yaml(5), each a key of a topology's mapping.
KINDS = ("tree", "block", "flat", "ring", "torus3d")


@dataclass(frozen=True)
class YamlTopology:
    """The topology the daemon plans with: its name and kind, its switches, and why it is
    read as flat when its kind is not modelled ("" otherwise)."""

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
    if not isinstance(doc, yaml.SequenceNode) or not doc.value:
        raise TopologyParseError(source, "expected a list of topologies (- topology: NAME ...)",
                                 line=doc.start_mark.line + 1 if doc is not None else None)
    chosen = [_fields(t, source, "a topology") for t in doc.value]
    default = next((t for t in chosen if _flag(t.get("cluster_default"), source)), chosen[0])
    name = _text(default.get("topology"), source, "topology", doc.value[chosen.index(default)])
    kinds = [k for k in KINDS if k in default and not _empty(default[k])]
    if not kinds and "flat" in default:
        kinds = ["flat"]  # topoconf's dump of a flat topology: every kind empty
    if len(kinds) != 1:
        raise TopologyParseError(source, f"topology {name} must have exactly one of {', '.join(KINDS)}",
                                 line=doc.value[chosen.index(default)].start_mark.line + 1)
    kind = kinds[0]
    body = default[kind]
    empty = SwitchTree(leaf_of={}, parent={}, link_speed={}, line_of={})
    if kind == "tree":
        return YamlTopology(name, kind, _tree(body, source))
    if kind == "block":
        return YamlTopology(name, kind, _blocks(name, body, source))
    if kind == "flat":
        return YamlTopology(name, kind, empty)
    return YamlTopology(name, kind, empty, f"{kind} topologies are not modelled: planned as one switch")


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
    blocks = _items(_fields(body, source, "block").get("blocks"), source, "block: blocks")
    records = []
    for node in blocks:
        f = _fields(node, source, "a block")
        block = _text(f.get("block"), source, "block", node)
        if block == name:
            raise TopologyParseError(source, f"block {block} is named as its topology", line=node.start_mark.line + 1)
        records.append((node.start_mark.line + 1, {"SwitchName": block, "Nodes": _hostlist(f.get("nodes"), source, "nodes", node)}))
    root = {"SwitchName": name, "Switches": ",".join(r["SwitchName"] for _, r in records)}
    return switch_tree([*records, (blocks[0].start_mark.line + 1, root)], source)


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
    """A hostlist string, or a list of them (joined as Slurm joins them)."""
    if isinstance(node, yaml.SequenceNode):
        return ",".join(_text(item, source, key) for item in node.value)
    return _text(node, source, key, parent)


def _flag(node: yaml.Node | None, source: str) -> bool:
    if node is None:
        return False
    value = str(node.value).strip().lower() if isinstance(node, yaml.ScalarNode) else ""
    if value not in ("true", "false", "yes", "no"):
        raise TopologyParseError(source, f"cluster_default must be true or false, found {value or 'a structure'}",
                                 line=node.start_mark.line + 1)
    return value in ("true", "yes")
