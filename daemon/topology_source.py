"""Where the daemon's ``Topology`` comes from: a cluster TOML the operator names, or Slurm's
own ``gres.conf`` (GPUs and NVLink islands from ``Links=``) and ``topology.yaml`` or
``topology.conf`` (switches).

Paths: ``gres_conf`` / ``topology_conf`` from the config, else next to ``slurm.conf``
(``SLURM_CONF`` as ``scontrol show config`` reports it, else the config's ``slurm_conf``,
``$SLURM_CONF``, ``/etc/slurm/slurm.conf``). There, as slurmctld does from 25.05 on (the
config's ``SLURM_VERSION``; when not known, too), a ``topology.yaml`` is read and a
topology.conf beside it ignored; a ``topology_conf`` ending in ``.yaml`` or ``.yml`` is
read as one too (`topology.slurm_yaml`). Neither file is fine (one leaf switch); a missing
gres.conf is an error that says which path was tried.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from attentived.topology import Topology, load_cluster_file, topology_from_slurm
from attentived.topology.slurm_conf import SwitchTree
from attentived.topology.slurm_yaml import parse_topology_yaml

from .records import SlurmVersion


class TopologySourceError(ValueError):
    pass


@dataclass(frozen=True)
class TopologySource:
    kind: str  # "cluster_file" or "slurm"
    paths: tuple[str, ...]  # the files read
    mtimes: tuple[float, ...]  # of `watched`
    note: str = ""  # what of the source is not modelled (a topology.yaml ring), said when loaded
    #: The files whose change means reading again (default: `paths`): also the switch file
    #: not read, or not there yet, beside slurm.conf (a topology.yaml written later wins).
    watched: tuple[str, ...] = ()

    def changed(self) -> bool:
        return _mtimes(self.watched or self.paths) != self.mtimes


def slurm_conf_dir(slurm_config: Mapping[str, str] | None, slurm_conf: str = "") -> Path:
    path = (slurm_config or {}).get("SLURM_CONF") or slurm_conf or os.environ.get("SLURM_CONF") or "/etc/slurm/slurm.conf"
    return Path(path).parent


def load_topology(*, cluster_file: str = "", gres_conf: str = "", topology_conf: str = "",
                  slurm_config: Mapping[str, str] | None = None, slurm_conf: str = "") -> tuple[Topology, TopologySource]:
    if cluster_file:
        topo = load_cluster_file(cluster_file)
        return topo, TopologySource("cluster_file", (cluster_file,), _mtimes((cluster_file,)),
                                    _blocks_missing(topo, slurm_config, cluster_file))
    base = slurm_conf_dir(slurm_config, slurm_conf)
    gres_path = Path(gres_conf) if gres_conf else base / "gres.conf"
    topo_path = Path(topology_conf) if topology_conf else _switches_file(base, (slurm_config or {}).get("SLURM_VERSION", ""))
    if not gres_path.is_file():
        raise TopologySourceError(
            f"{gres_path}: no gres.conf to read GPUs and NVLinks from (set gres_conf or cluster_file in the config)")
    try:
        gres_text = gres_path.read_text()
    except OSError as e:
        raise TopologySourceError(f"{gres_path}: cannot read: {e}") from None
    switches: str | SwitchTree | None = None
    note = ""
    if topo_path.is_file():
        switches = topo_path.read_text()
        if topo_path.suffix in (".yaml", ".yml"):
            chosen = parse_topology_yaml(switches, source=str(topo_path))
            switches, note = chosen.tree, chosen.unmodelled
    elif topology_conf:
        raise TopologySourceError(f"{topo_path}: no such topology file")
    topo = topology_from_slurm(gres_text, switches, gres_source=str(gres_path), topology_source=str(topo_path))
    paths = (str(gres_path),) + ((str(topo_path),) if switches is not None else ())
    candidates = (topo_path,) if topology_conf else (base / "topology.yaml", base / "topology.conf")
    watched = (str(gres_path), *(str(p) for p in candidates))
    note = note or _blocks_missing(topo, slurm_config, str(topo_path))
    return topo, TopologySource("slurm", paths, _mtimes(watched), note, watched)


def _blocks_missing(topo: Topology, slurm_config: Mapping[str, str] | None, path: str) -> str:
    """What to say when slurmctld allocates by blocks the daemon was not shown: it would
    plan jobs across blocks, which slurmctld refuses."""
    if topo.blocks is None and (slurm_config or {}).get("TopologyPlugin") == "topology/block":
        return (f"TopologyPlugin=topology/block but {path} describes no blocks: plans may put a job across "
                "blocks, which slurmctld refuses (name the blocks' topology.conf or topology.yaml)")
    return ""


def _switches_file(base: Path, slurm_version: str) -> Path:
    """topology.yaml where it exists (slurmctld then ignores topology.conf), else topology.conf;
    topology.conf on a Slurm before 25.05, which reads no topology.yaml."""
    yaml_path = base / "topology.yaml"
    # a version not known (no Slurm asked): the file there is the one meant
    before_yaml = SlurmVersion.older_than(slurm_version, 25, 5, unknown=False)
    return yaml_path if yaml_path.is_file() and not before_yaml else base / "topology.conf"


def _mtimes(paths: tuple[str, ...]) -> tuple[float, ...]:
    out = []
    for p in paths:
        try:
            out.append(os.stat(p).st_mtime)
        except OSError:
            out.append(-1.0)
    return tuple(out)
