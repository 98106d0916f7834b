"""Slurm snapshot -> ClusterState (recorded 22.05 mix), and the topology from Slurm's files."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from attentived.daemon.records import SlurmJob, SlurmNode, SlurmVersion, Snapshot
from attentived.daemon.scontrol_text import parse_reservations
from attentived.daemon.slurm_json import parse_sinfo, parse_squeue
from attentived.daemon.snapshot import build_state, in_partitions, job_model
from attentived.daemon.topology_source import (
    TopologySourceError,
    load_topology,
    slurm_conf_dir,
)
from attentived.ops.lab import Lab
from attentived.topology import Link, uniform

R22 = Path(__file__).parent / "fixtures" / "slurm-22.05"
TOPO = uniform(4, 8, nodes_per_switch=2)


def snapshot22() -> Snapshot:
    sq = parse_squeue((R22 / "squeue.json").read_text())
    resv = parse_reservations((R22 / "scontrol-show-reservation.txt").read_text())
    now = min(r.start_time for r in resv if r.start_time is not None) + 10  # alice_now active, maint_later not yet
    assert sq.version is not None
    return Snapshot(sq.version, now, sq.jobs, parse_sinfo((R22 / "sinfo.json").read_text()), resv)


def test_recorded_mix_to_cluster_state():
    built = build_state(snapshot22(), TOPO, ["main"])
    st = built.state
    assert {p.job_id for p in st.pending} == {"8", "9", "12", "13"}  # pend_a, pend_b, pinned, multi
    assert built.counts["ineligible"] == 2  # held, admin_held
    assert built.constrained == {"12"}  # its own ReqNodeList/ExcNodeList
    multi = next(p for p in st.pending if p.job_id == "13")
    assert multi.num_gpus == 16 and multi.num_nodes == 2
    running = {r.job_id: r for r in st.running}
    assert set(running) == {"5", "6", "7"}  # run_c (partition other) holds GPUs too
    assert [TOPO.gpu_name(g) for g in running["7"].gpus] == ["node1:4", "node1:5"]
    assert len(running["6"].gpus) == 16
    # node1 is alice_now's: the managed jobs are kept off it, whenever its GPUs free up
    assert all("node1" in p.exclude for p in st.pending)
    # node1: alice_now reservation (not ours); node2 drained; node3/4 full
    assert st.num_free == 0
    assert built.node_reasons["node2"] == "IDLE+DRAIN" and built.node_reasons["node1"] == "reservation alice_now"
    assert st.users["alice"].jobs == 1 and st.users["bob"].jobs == 1 and st.users["carol"].jobs == 1
    assert st.users["bob"].gpu_seconds >= 0


def test_free_mask_excludes_used_down_and_unmanaged():
    snap = snapshot22()
    snap = Snapshot(snap.version, snap.taken_at, snap.jobs, snap.nodes, ())  # no reservations
    built = build_state(snap, TOPO, ["main"])
    free = {TOPO.gpu_name(g) for g in np.flatnonzero(built.state.free)}
    assert free == {"node1:6", "node1:7"}
    assert build_state(snap, TOPO, ["nothere"]).state.num_free == 0


def test_own_reservations_count_as_free_and_others_do_not():
    nodes = tuple(SlurmNode(f"node{i}", "IDLE", gpus=8, partitions=("main",)) for i in range(1, 5))
    from attentived.daemon.records import SlurmReservation
    resv = (SlurmReservation("attentived-9", ("node1",), ("bob",), start_time=0, end_time=1e12),
            SlurmReservation("maint", ("node2",), ("root",), start_time=0, end_time=1e12),
            SlurmReservation("later", ("node3",), ("root",), start_time=5e11, end_time=1e12))
    snap = Snapshot(SlurmVersion(24, 11, 5), 1000.0, (), nodes, resv)
    built = build_state(snap, TOPO, ["main"], owned_reservations={"attentived-9": {"created": 0.0, "start_time": None}})
    assert built.state.num_free == 24 and "attentived-9" in built.own_reservations
    assert "attentived-9" not in build_state(snap, TOPO, ["main"]).own_reservations  # the name alone proves nothing
    assert built.node_reasons == {"node2": "reservation maint"}


def test_partitions_and_models():
    j = SlurmJob("1", partition="main,other")
    assert not in_partitions(j, ["main"]) and in_partitions(j, ["main", "other"])
    assert job_model(SlurmJob("1", name="wrap", comment="model=resnet50 epochs=3")) == "resnet50"
    assert job_model(SlurmJob("1", name="bert-large")) == "bert-large"
    assert job_model(SlurmJob("1", name="weird; name")) is None


def test_a_topology_yaml_beside_slurm_conf_wins_over_topology_conf(tmp_path):
    """As slurmctld from 25.05 on: topology.yaml, where it exists, and not topology.conf."""
    etc = Lab(run_dir=tmp_path / "lab").render()
    conf = {"SLURM_CONF": str(etc / "slurm.conf"), "SLURM_VERSION": "26.05.5"}
    _, before = load_topology(slurm_config=conf)  # topology.conf, until a topology.yaml appears
    assert before.paths[-1] == str(etc / "topology.conf") and not before.changed()
    (etc / "topology.yaml").write_text("- topology: racks\n  cluster_default: true\n  tree:\n    switches:\n"
                                       "      - switch: rack1\n        nodes: node[1-3]\n"
                                       "      - switch: rack2\n        nodes: node4\n")
    assert before.changed()
    topo, src = load_topology(slurm_config=conf)
    assert [n.switch for n in topo.nodes] == ["rack1", "rack1", "rack1", "rack2"] and not src.note
    assert src.paths == (str(etc / "gres.conf"), str(etc / "topology.yaml")) and not src.changed()
    (etc / "topology.yaml").write_text("- topology: r\n  ring:\n    rings:\n      - ring: r1\n        nodes: node[1-4]\n")
    os.utime(etc / "topology.yaml", (1e9, 1e9))  # a change within the clock's tick would not show
    assert src.changed()
    flat, src2 = load_topology(slurm_config=conf)
    assert len(flat.switch_names) == 1 and "ring topologies are not modelled" in src2.note
    named, _ = load_topology(slurm_config=conf, topology_conf=str(etc / "topology.conf"))
    assert [n.switch for n in named.nodes] == ["sw1", "sw1", "sw2", "sw2"]  # the operator's choice stands
    older, _ = load_topology(slurm_config={**conf, "SLURM_VERSION": "24.11.5"})  # reads no topology.yaml
    assert [n.switch for n in older.nodes] == ["sw1", "sw1", "sw2", "sw2"]
    with pytest.raises(TopologySourceError, match="no such topology file"):
        load_topology(slurm_config=conf, topology_conf=str(etc / "none.yaml"))


def test_a_block_topology_conf_is_planned_by_and_a_missing_one_said(tmp_path):
    """topology/block's topology.conf (as the lab's record_blocks.sh ran it): its blocks
    reach the plan; where slurmctld allocates by blocks the daemon was not shown, it says so."""
    etc = Lab(run_dir=tmp_path / "lab").render()
    conf = {"SLURM_CONF": str(etc / "slurm.conf"), "SLURM_VERSION": "24.11.5", "TopologyPlugin": "topology/block"}
    tree, _ = load_topology(slurm_config=conf)  # the lab's switches: no blocks
    (etc / "topology.conf").write_text("BlockName=b1 Nodes=node[1-2]\nBlockName=b2 Nodes=node[3-4]\nBlockSizes=2\n")
    blocks, src = load_topology(slurm_config=conf)
    assert blocks.blocks is not None and blocks.blocks.names == ("b1", "b2") and not src.note
    assert [n.switch for n in blocks.nodes] == ["b1", "b1", "b2", "b2"]
    (etc / "topology.conf").write_text("SwitchName=s1 Nodes=node[1-4]\n")
    _, said = load_topology(slurm_config=conf)
    assert "TopologyPlugin=topology/block but" in said.note and "describes no blocks" in said.note
    _, fine = load_topology(slurm_config={**conf, "TopologyPlugin": "topology/tree"})
    assert not fine.note and tree.blocks is None


def test_missing_indices_are_guessed_with_a_warning():
    nodes = (SlurmNode("node1", "MIXED", gpus=8, gpus_used=2, partitions=("main",)),)
    job = SlurmJob("3", user="a", state="RUNNING", gpus=2, gpus_per_node=2, per_node_fixed=True, nodes=("node1",),
                   start_time=1.0, submit_time=1.0, partition="main")
    built = build_state(Snapshot(SlurmVersion(22, 5), 10.0, (job,), nodes), TOPO, ["main"])
    assert len(built.running_gpus["3"]) == 2 and any("no GPU indices" in w for w in built.warnings)


def test_topology_from_the_labs_slurm_files(tmp_path):
    etc = Lab(run_dir=tmp_path / "lab").render()
    topo, src = load_topology(slurm_config={"SLURM_CONF": str(etc / "slurm.conf")})
    assert [n.name for n in topo.nodes] == ["node1", "node2", "node3", "node4"] and topo.num_gpus == 32
    assert topo.nodes[0].islands == ((0, 1, 2, 3), (4, 5, 6, 7))
    assert topo.link(topo.gpu_id("node1", 0), topo.gpu_id("node2", 0)) == Link.NETWORK
    assert topo.link(topo.gpu_id("node1", 0), topo.gpu_id("node3", 0)) == Link.SPINE
    assert src.kind == "slurm" and not src.changed()
    topo2, _ = load_topology(gres_conf=str(etc / "gres.conf"))  # no topology.conf: one leaf switch
    assert len(topo2.switch_names) == 1
    assert slurm_conf_dir({"SLURM_CONF": "/x/y/slurm.conf"}) == Path("/x/y")
    with pytest.raises(TopologySourceError, match="no gres.conf"):
        load_topology(gres_conf=str(tmp_path / "missing.conf"))
    cluster = tmp_path / "cluster.toml"
    cluster.write_text('[[nodes]]\nnames = "gpu[1-2]"\ngpus = 4\n')
    topo3, src3 = load_topology(cluster_file=str(cluster))
    assert src3.kind == "cluster_file" and topo3.num_gpus == 8
