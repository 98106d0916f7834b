"""What slurmctld checks besides GPUs, from real JSON to the decision state, and the daemon's
pieces that keep plans safe: stable placements, the hold chain, stalls, idle GPUs with a queue."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from attentived.agents.plan import Hold, Plan, Start
from attentived.agents.registry import make_policy
from attentived.agents.state import ClusterState, NodeCapacity, PendingJob, RunningJob
from attentived.daemon.chain import chain_holds
from attentived.daemon.idle import IdleWatch
from attentived.daemon.job_defaults import JobDefaults
from attentived.daemon.journal import Journal
from attentived.daemon.placements import PlacementTracker
from attentived.daemon.prom import Metrics
from attentived.daemon.records import SlurmJob, SlurmNode, SlurmParseError, SlurmPartition, SlurmVersion, Snapshot
from attentived.daemon.scontrol_text import parse_partitions
from attentived.daemon.slurm_json import parse_nodes, parse_sinfo, parse_squeue
from attentived.daemon.snapshot import build_state
from attentived.daemon.stability import stabilize
from attentived.topology import uniform

from .test_apply import NOW, TOPO

FIX = Path(__file__).parent / "fixtures" / "slurm-22.05"


def test_requests_are_parsed_from_real_22_05_json():
    jobs = {j.job_id: j for j in parse_squeue((FIX / "squeue-requests.json").read_text()).jobs}
    assert jobs["2"].cpus == 7 and jobs["2"].required_nodes == ("node1",)
    assert jobs["5"].exclusive and not jobs["4"].exclusive
    assert jobs["6"].gpu_type == "h100" and jobs["4"].gpu_type == ""
    assert jobs["7"].mem_per_node == 20480 and jobs["7"].gpus == 3
    assert jobs["8"].excluded_nodes == ("node3",) and jobs["8"].features == "sw1"
    assert jobs["9"].array and jobs["9"].pending and jobs["9"].eligible and jobs["9"].gpus == 1
    assert jobs["10"].mem_per_cpu == 1000 and jobs["10"].num_nodes == 2
    assert jobs["12"].cpus == 4  # --cpus-per-gpu=2 x 2 GPUs, more than the 2 `cpus` squeue shows
    assert all(j.last_evaluated for j in jobs.values() if j.pending)


@pytest.mark.parametrize("version", ["slurm-22.05", "slurm-24.11", "slurm-26.05"])
def test_memory_per_gpu_is_parsed_from_real_json_and_yields_to_a_users_own(version):
    """``--mem-per-gpu`` and ``DefMemPerGPU`` (fixtures/README.md): memory per GPU, unless the
    user set a memory per node or per CPU, which cons_tres then allocates instead."""
    jobs = {j.job_id: j for j in parse_squeue((FIX.parent / version / "squeue-mem-per-gpu.json").read_text()).jobs}
    per_gpu = {j: (jobs[j].mem_per_node, jobs[j].mem_per_cpu, jobs[j].mem_per_gpu) for j in ("3", "4", "5", "6")}
    assert per_gpu == {"3": (0, 0, 3000), "4": (0, 0, 3072), "5": (0, 0, 4096), "6": (0, 0, 4096)}
    assert jobs["7"].mem_per_gpu == jobs["8"].mem_per_gpu == 0
    # 24.11 shows the per-GPU default as their memory per node; what they asked is in tres_req_str
    assert (jobs["7"].mem_per_node, jobs["7"].mem_per_cpu) == (5000, 0)
    assert jobs["8"].mem_per_node * 1 + jobs["8"].mem_per_cpu * jobs["8"].cpus == 2000
    # what the plan then sees: a pending job's memory per GPU, a running one's in all where
    # memory is allocated (CR_*_Memory), none where it is not (the lab's CR_Core: AllocMem 0)
    nodes = tuple(SlurmNode(f"node{i}", "MIXED", gpus=8, gpu_type="h100", partitions=("main",), cpus=8,
                            real_memory=64000) for i in range(1, 5))
    snap = Snapshot(SlurmVersion(22, 5, 8), NOW, tuple(replace(j, reason="Priority") for j in jobs.values()), nodes)
    # (not known, the config unread: it holds what it asked, as nodes' allocated memory may say)
    for defaults, held in ((JobDefaults(memory_consumable=True), 6000), (JobDefaults.of({"SelectTypeParameters": "CR_CORE"}), 0),
                           (JobDefaults(), 6000)):
        built = build_state(snap, TOPO, ["main"], defaults=defaults)
        assert {p.job_id: p.mem_per_gpu for p in built.state.pending} == {"4": 3072, "6": 4096}
        assert next(r for r in built.state.running if r.job_id == "3").mem == held


@pytest.mark.parametrize(("version", "nodes_file"), [("slurm-22.05", "sinfo-exclusive.json"),
                                                     ("slurm-24.11", "scontrol-show-nodes-exclusive.json"),
                                                     ("slurm-26.05", "scontrol-show-nodes-exclusive.json")])
def test_jobs_slurm_keeps_apart_hold_their_nodes_whole(version, nodes_file):
    """``--exclusive=user``, partitions with ``ExclusiveUser=YES`` or ``OverSubscribe=EXCLUSIVE``
    (fixtures/README.md): Slurm starts no other user's job on their nodes, though a ``user``
    job is allocated only its 2 GPUs. Bob's job asks for node1, where alice's such job runs
    with 6 GPUs unallocated: Slurm leaves it pending (Resources), and so must the plan."""
    d = FIX.parent / version
    ids = json.loads((d / "scenario-exclusive.json").read_text())
    jobs = {j.job_id: j for j in parse_squeue((d / "squeue-exclusive.json").read_text()).jobs}
    kept_apart = ("exclusive_user_running", "exclusive_user_partition_running", "exclusive_partition_running",
                  "exclusive_partition_held", "exclusive_running")
    assert all(jobs[ids[k]].exclusive for k in kept_apart) and not jobs[ids["plain_behind_it"]].exclusive
    assert jobs[ids["exclusive_user_running"]].gpu_indices == {"node1": (0, 1)}
    raw = (d / nodes_file).read_text()
    nodes = parse_sinfo(raw) if nodes_file.startswith("sinfo") else parse_nodes(raw)
    snap = Snapshot(SlurmVersion(22, 5, 8), NOW, tuple(jobs.values()), nodes)
    built = build_state(snap, TOPO, ["main"])
    assert not built.state.free.any()
    assert built.node_reasons == {"node1": f"kept whole by job {ids['exclusive_user_running']}",
                                  "node2": f"kept whole by job {ids['exclusive_user_partition_running']}"}
    assert [p.job_id for p in built.state.pending] == [ids["plain_behind_it"]]
    plan = make_policy("fifo+consolidate+backfill").decide(built.state)
    assert not plan.starts
    user_run = next(r for r in built.state.running if r.job_id == ids["exclusive_user_running"])
    assert user_run.gpus == tuple(range(8)) and user_run.exclusive  # what it keeps from others; node1 back whole
    assert built.running_gpus[ids["exclusive_user_running"]] == (0, 1)  # what Slurm allocated it


def test_partitions_keeping_nodes_apart_in_26_05s_words():
    """26.05 writes a partition's exclusivity as ``Exclusive=NODE|USER|TOPO`` (recorded: its
    held jobs show ``shared`` none, user and topo in data_parser v0.0.44)."""
    d = FIX.parent / "slurm-26.05"
    ids = json.loads((d / "scenario-exclusive-partitions.json").read_text())
    jobs = {j.job_id: j for j in parse_squeue((d / "squeue-exclusive-partitions.json").read_text()).jobs}
    assert {k: jobs[i].exclusive for k, i in ids.items()} == {"node": True, "user": True, "topo": True, "plain": False}


def test_a_node_kept_by_a_user_comes_back_when_its_last_exclusive_job_ends():
    """alice's ``--exclusive=user`` job (2 GPUs, 10 h) shares node1 with her own 1-GPU job (1 h),
    which Slurm allows; carol's CPU-only ``--exclusive`` job holds node2 for 30 min; nodes
    3-4 are full for 2 h. node1 stays alice's until her long job ends: all 8 of its GPUs
    come back in 10 h, node2's in 30 min, so an 8-GPU job is held for node2."""
    nodes = tuple(SlurmNode(f"node{i}", "MIXED", gpus=8, gpu_type="h100", partitions=("main",), cpus=8,
                            real_memory=64000) for i in range(1, 5))

    def run(job_id, user, node, idx, hours, **kw):
        return SlurmJob(job_id, user=user, state="RUNNING", gpus=len(idx), nodes=(node,), gpu_indices={node: tuple(idx)},
                        cpus=1, start_time=NOW, time_limit=hours * 3600, **kw)

    jobs = (run("1", "alice", "node1", (0, 1), 10, exclusive=True), run("2", "alice", "node1", (2,), 1),
            run("3", "carol", "node2", (), 0.5, exclusive=True), run("4", "bob", "node3", range(8), 2),
            run("5", "bob", "node4", range(8), 2),
            SlurmJob("9", user="dave", partition="main", gpus=8, gpus_per_node=8, per_node_fixed=True, cpus=1,
                     submit_time=NOW, priority=1, reason="Priority"))
    built = build_state(Snapshot(SlurmVersion(22, 5, 8), NOW, jobs, nodes), TOPO, ["main"])
    running = {r.job_id: r for r in built.state.running}
    assert not built.state.free.any()
    assert running["1"].gpus == tuple(range(8)) and not running["1"].exclusive  # shares node1
    assert running["1"].expected_end(NOW) == NOW + 10 * 3600
    assert "2" not in running and running["1"].cpus == 2  # alice's short job comes back with the owner
    assert built.running_gpus["1"] == (0, 1) and built.running_gpus["2"] == (2,)  # what Slurm allocated
    assert running["3"].gpus == tuple(range(8, 16)) and running["3"].exclusive
    assert built.node_reasons == {"node1": "kept whole by job 1", "node2": "kept whole by job 3"}
    plan = make_policy("fifo+consolidate").decide(built.state)
    assert [(h.job_id, sorted(set(TOPO.gpu_node[list(h.gpus)].tolist()))) for h in plan.holds] == [("9", [1])]


@pytest.mark.parametrize(("version", "nodes_file"), [("slurm-22.05", "sinfo-mem-whole.json"),
                                                     ("slurm-24.11", "scontrol-show-nodes-mem-whole.json"),
                                                     ("slurm-26.05", "scontrol-show-nodes-mem-whole.json")])
def test_a_job_asking_no_memory_takes_whole_nodes_where_slurm_allocates_memory(version, nodes_file):
    """Under ``CR_Core_Memory`` with no ``DefMemPer*`` (fixtures/README.md), ``--mem=0`` and no
    ``--mem`` both take all of a node's memory and start only where none is allocated.
    node3 runs a job of 1000 MB with 6 GPUs free: carol's two jobs asking none wait (Slurm
    says Resources), and so must the plan; bob's job of 1000 MB may start there."""
    d = FIX.parent / version
    ids = json.loads((d / "scenario-mem-whole.json").read_text())
    jobs = parse_squeue((d / "squeue-mem-whole.json").read_text()).jobs
    raw = (d / nodes_file).read_text()
    nodes = parse_sinfo(raw) if nodes_file.startswith("sinfo") else parse_nodes(raw)
    snap = Snapshot(SlurmVersion(22, 5, 8), NOW, tuple(replace(j, required_nodes=()) if j.job_id == ids["behind_whole_memory"]
                                                      else j for j in jobs), nodes)
    defaults = JobDefaults.of({"SelectTypeParameters": "CR_CORE_MEMORY", "JobDefaults": "(null)"})
    assert defaults == JobDefaults(memory_consumable=True, known=True)
    built = build_state(snap, TOPO, ["main"], defaults=defaults)
    pending = {p.job_id: p for p in built.state.pending}
    assert pending[ids["mem0_pending"]].exclusive and pending[ids["default_pending"]].exclusive
    assert not pending[ids["behind_whole_memory"]].exclusive
    running = {r.job_id: r for r in built.state.running}
    assert running[ids["default_running"]].exclusive and running[ids["mem0_running"]].exclusive  # nodes back whole
    assert TOPO.per_node(built.state.free).tolist() == [0, 0, 6, 0]
    starts = {s.job_id: s for s in make_policy("fifo+consolidate+backfill").decide(built.state).starts}
    assert set(starts) == {ids["behind_whole_memory"]} and set(TOPO.gpu_node[list(starts[ids["behind_whole_memory"]].gpus)]) == {2}
    # without CR_*_Memory, memory is not allocated: the lab's own setting (CR_Core)
    unsized = build_state(snap, TOPO, ["main"], defaults=JobDefaults.of({"SelectTypeParameters": "CR_CORE"}))
    assert not {p.job_id: p for p in unsized.state.pending}[ids["mem0_pending"]].exclusive


def test_memory_slurm_gives_a_job_that_asked_none():
    """An idle node of any size takes a job asking no memory under CR_*_Memory (a node
    with more memory elsewhere does not matter); the cluster's DefMemPerGPU is what a job
    slurmctld has not looked at yet gets, and ``--mem=0`` (the user set it) is whole nodes."""
    big = {"node4": 512000}
    nodes = tuple(SlurmNode(f"node{i}", "IDLE" if i == 1 else "MIXED", gpus=8, gpu_type="h100", partitions=("main",),
                            cpus=8, real_memory=big.get(f"node{i}", 64000), alloc_memory=0 if i == 1 else 1000)
                  for i in range(1, 5))
    running = tuple(SlurmJob(f"r{i}", user="bob", state="RUNNING", gpus=8 if i < 4 else 4, nodes=(f"node{i}",),
                             gpu_indices={f"node{i}": tuple(range(8 if i < 4 else 4))}, mem_per_node=1000, cpus=1,
                             start_time=NOW, time_limit=3600) for i in (2, 3, 4))
    plain = SlurmJob("10", user="alice", partition="main", gpus=2, cpus=1, submit_time=NOW, priority=1, reason="Priority")
    snap = Snapshot(SlurmVersion(22, 5, 8), NOW, (plain, *running), nodes)
    consumable = JobDefaults.of({"SelectTypeParameters": "CR_Core_Memory"})
    starts = make_policy("fifo+consolidate").decide(build_state(snap, TOPO, ["main"], defaults=consumable).state).starts
    assert [(s.job_id, sorted(set(TOPO.gpu_node[list(s.gpus)].tolist()))) for s in starts] == [("10", [0])]
    per_gpu = JobDefaults.of({"SelectTypeParameters": "CR_Core_Memory", "JobDefaults": "DefCpuPerGPU=2,DefMemPerGPU=4096"})
    assert per_gpu == JobDefaults(memory_consumable=True, mem_per_gpu=4096, cpus_per_gpu=2, known=True)
    (job,) = build_state(snap, TOPO, ["main"], defaults=per_gpu).state.pending
    assert (job.mem_per_gpu, job.exclusive) == (4096, False)
    zero = Snapshot(SlurmVersion(22, 5, 8), NOW, (replace(plain, mem_set=True), *running), nodes)
    (job,) = build_state(zero, TOPO, ["main"], defaults=per_gpu).state.pending
    assert (job.mem_per_gpu, job.exclusive) == (0, True)


@pytest.mark.parametrize("version", ["slurm-22.05", "slurm-24.11", "slurm-26.05"])
def test_memory_under_a_per_gpu_default_is_what_slurm_allocates(version):
    """``squeue-mem-defaults.json`` (fixtures/README.md): CR_Core_Memory with DefMemPerGPU=4096.
    ``--mem=0`` is whole nodes (on 24.11 it reads as the memory slurmctld counts for it, a
    node's: nothing tells it from ``--mem=64000``), ``--mem=5000`` is 5000 per node, a job
    that set nothing gets 4096 per GPU, ``--mem-per-cpu=700 -c 2`` is 1400 per node."""
    jobs = {j.job_id: j for j in parse_squeue((FIX.parent / version / "squeue-mem-defaults.json").read_text()).jobs}
    defaults = JobDefaults.of({"SelectTypeParameters": "CR_CORE_MEMORY", "JobDefaults": "DefMemPerGPU=4096"})
    seen = {j: defaults.applied(jobs[j]) for j in ("2", "6", "7", "8", "9")}
    got = {j: (x.mem_per_node + x.mem_per_cpu * x.cpus, x.mem_per_gpu, x.exclusive) for j, x in seen.items()}
    mem0 = (0, 0, True) if version == "slurm-22.05" else (64000, 0, False)
    assert got == {"2": (1000, 0, False), "6": mem0, "7": (5000, 0, False), "8": (0, 4096, False), "9": (1400, 0, False)}


def test_a_cpu_job_holding_a_nodes_memory_gives_the_node_back_when_it_ends():
    """Under CR_Core_Memory carol's CPU job asking no memory holds node2's memory for 30 min,
    nodes 1, 3 and 4 are full for 5 h: node2's GPUs are not free, and come back with it."""
    nodes = tuple(SlurmNode(f"node{i}", "MIXED", gpus=8, gpu_type="h100", partitions=("main",), cpus=8,
                            real_memory=64000) for i in range(1, 5))
    full = tuple(SlurmJob(f"r{i}", user="bob", state="RUNNING", gpus=8, nodes=(f"node{i}",), mem_per_node=1000,
                          gpu_indices={f"node{i}": tuple(range(8))}, cpus=1, start_time=NOW, time_limit=5 * 3600)
                 for i in (1, 3, 4))
    cpu = SlurmJob("c", user="carol", state="RUNNING", gpus=0, nodes=("node2",), cpus=2, start_time=NOW, time_limit=1800)
    wide = SlurmJob("9", user="dave", partition="main", gpus=8, gpus_per_node=8, per_node_fixed=True, cpus=1,
                    mem_per_node=1000, submit_time=NOW, priority=1, reason="Priority")
    snap = Snapshot(SlurmVersion(22, 5, 8), NOW, (*full, cpu, wide), nodes)
    built = build_state(snap, TOPO, ["main"], defaults=JobDefaults(memory_consumable=True))
    assert not built.state.free.any() and built.node_reasons == {"node2": "kept whole by job c"}
    plan = make_policy("fifo+consolidate").decide(built.state)
    assert [(h.job_id, sorted(set(TOPO.gpu_node[list(h.gpus)].tolist()))) for h in plan.holds] == [("9", [1])]


def test_an_odd_tres_request_string_falls_back_to_what_squeue_shows():
    raw = json.loads((FIX.parent / "slurm-24.11" / "squeue-mem-defaults.json").read_text())
    (rec,) = [j for j in raw["jobs"] if j["job_id"] == 7]
    for odd in ("cpu=1,mem=.,node=1", "cpu=1,mem=1.2.3G", "mem=", "cpu=1"):
        (job,) = parse_squeue(json.dumps({"meta": raw["meta"], "jobs": [{**rec, "tres_req_str": odd}]})).jobs
        assert (job.mem_per_node, job.mem_per_gpu) == (4096, 0), odd


@pytest.mark.parametrize("version", ["slurm-22.05", "slurm-24.11", "slurm-26.05"])
def test_cpus_under_a_per_gpu_default_are_what_slurm_allocates(version):
    """``squeue-cpu-defaults.json`` (fixtures/README.md): DefCpuPerGPU=2. A job slurmctld has
    not looked at shows one CPU: with no ``-c`` and no ``--cpus-per-gpu`` it gets 2 per GPU."""
    d = FIX.parent / version
    ids = json.loads((d / "scenario-cpu-defaults.json").read_text())
    jobs = {j.job_id: j for j in parse_squeue((d / "squeue-cpu-defaults.json").read_text()).jobs}
    defaults = JobDefaults.of({"JobDefaults": "DefCpuPerGPU=2"})
    assert defaults == JobDefaults(False, cpus_per_gpu=2, known=True)
    got = {k: defaults.allocation(jobs[ids[k]])[0] for k in ids}
    assert got == {"default_running": 4, "default_held": 4, "c1_held": 1, "cpus_per_gpu1_held": 2}
    assert {k: JobDefaults().allocation(jobs[ids[k]])[0] for k in ids}["default_held"] == 1


@pytest.mark.parametrize("version", ["slurm-22.05", "slurm-24.11", "slurm-26.05"])
def test_a_partitions_own_defaults_are_what_slurm_allocates_its_jobs(version):
    """``squeue-partition-defaults.json`` (fixtures/README.md): the cluster gives 1 CPU per GPU
    (CR_Core); partition ``cpudef`` 3, partition ``gpumem`` 2 and 2048 MB per GPU, and
    allocates memory (its own CR_Core_Memory). slurmctld gave the running jobs exactly that;
    the held ones, which it has not looked at, show 1 CPU and no memory."""
    d = FIX.parent / version
    ids = json.loads((d / "scenario-partition-defaults.json").read_text())
    jobs = {j.job_id: j for j in parse_squeue((d / "squeue-partition-defaults.json").read_text()).jobs}
    parts = parse_partitions((d / "scontrol-show-partition.txt").read_text())
    assert [(p.name, p.default) for p in parts] == [("main", True), ("other", False), ("gpumem", False), ("cpudef", False)]
    conf = {"SelectTypeParameters": "CR_CORE", "JobDefaults": "DefCpuPerGPU=1"}
    defaults = JobDefaults.of(conf, parts)
    assert defaults.partitions == {"gpumem": JobDefaults(True, 2048, 2), "cpudef": JobDefaults(False, 0, 3)}
    got = {k: (a.cpus, a.mem_per_gpu, a.exclusive) for k in ids for a in [defaults.allocation(jobs[ids[k]])]}
    mem0 = (2, 0, True) if version == "slurm-22.05" else (2, 0, False)  # 24.11: a node's worth of --mem (README)
    assert defaults.allocation(jobs[ids["gpumem_mem0_node1"]]).mem_per_node == (0 if version == "slurm-22.05" else 64000)
    assert got == {"gpumem_running": (4, 2048, False), "cpudef_running": (6, 0, False), "main_running": (2, 0, False),
                   "gpumem_mem0_node1": mem0, "cpudef_held": (6, 0, False), "gpumem_held": (4, 2048, False),
                   "both_held": (6, 2048, False), "cpudef_c1_held": (1, 0, False)}
    assert {r.cpus for r in (jobs[ids["cpudef_running"]], jobs[ids["gpumem_running"]])} == {6, 4}  # as planned
    cluster_only = JobDefaults.of(conf)
    assert cluster_only.allocation(jobs[ids["cpudef_held"]]).cpus == 2  # what was planned before
    assert (defaults.origin("cpudef", "cpus_per_gpu"), defaults.origin("main", "cpus_per_gpu")) == (
        "partition cpudef's", "the cluster's")
    assert defaults.origin("main,gpumem", "memory_consumable") == "partition gpumem's"
    # a partition's own type replaces the cluster's only where that is a CR_Core/CR_Socket type
    assert not JobDefaults.of({"SelectTypeParameters": "CR_CPU"}, parts).partitions["gpumem"].memory_consumable
    assert not JobDefaults.of({"SelectTypeParameters": "CR_CORE_MEMORY"},
                              [replace(parts[0], select_type="CR_CORE")]).partitions["main"].memory_consumable


@pytest.mark.parametrize("version", ["slurm-22.05", "slurm-24.11", "slurm-26.05"])
def test_a_memory_per_gpu_default_replaces_a_default_per_cpu(version):
    """``squeue-mem-per-cpu-default.json`` (fixtures/README.md): partition gpumem also sets
    ``DefMemPerCPU=500``, which squeue shows on a held job from its submission. slurmctld
    gave the running ``-c 2 --gres=gpu:2`` job gpumem's 2048 MB per GPU (``AllocMem=4096``),
    not 1000: without the user's ``--mem`` or ``--mem-per-cpu`` the GPUs' memory is all."""
    d = FIX.parent / version
    ids = json.loads((d / "scenario-mem-per-cpu-default.json").read_text())
    jobs = {j.job_id: j for j in parse_squeue((d / "squeue-mem-per-cpu-default.json").read_text()).jobs}
    held = jobs[ids["held"]]
    assert (held.mem_per_cpu, held.mem_per_gpu, held.mem_set) == (500, 0, False)
    parts = parse_partitions((d / "scontrol-show-partition.txt").read_text())
    defaults = JobDefaults.of({"SelectTypeParameters": "CR_CORE", "JobDefaults": "DefCpuPerGPU=1"}, parts)
    assert defaults.allocation(jobs[ids["running"]]) == (2, 0, 0, 2048, False)
    node = (d / "scontrol-show-node-mem-per-cpu-default.txt").read_text()
    assert "NodeName=node4" in node and f"AllocMem={2048 * held.gpus}" in node  # what slurmctld allocated
    # untested, slurmctld checks the shown default first and the per-GPU one after: both
    # are planned for, in one kind (per CPU here: 2 CPUs come with 2 GPUs)
    assert defaults.allocation(held) == (2, 0, 2048, 0, False)
    assert defaults.allocation(replace(held, mem_per_cpu=3000)) == (2, 0, 3000, 0, False)
    assert JobDefaults().allocation(held) == (2, 0, 500, 0, False)  # no per-GPU default: the CPUs'
    mine = replace(held, mem_set=True)  # the user's own --mem-per-cpu=500 stands
    assert defaults.allocation(mine) == (2, 0, 500, 0, False)


def test_a_job_of_several_partitions_is_planned_for_each_of_them():
    """``-p a,b``: a pinned node may be in one partition only, so the plan must suit each.
    Cluster CR_Core; ``a`` allocates memory and gives no default (a job asking none takes
    whole nodes there), ``b`` gives 8192 MB per GPU; ``c`` allocates none."""
    conf = {"SelectTypeParameters": "CR_CORE_MEMORY,CR_ONE_TASK_PER_CORE", "JobDefaults": "DefCpuPerGPU=4"}
    parts = [SlurmPartition("a", select_type="CR_CORE_MEMORY", job_defaults="DefCpuPerGPU=1"),
             SlurmPartition("b", job_defaults="DefMemPerGPU=8192"), SlurmPartition("c", select_type="CR_CORE")]
    defaults = JobDefaults.of(conf, parts)
    assert defaults.partitions["c"].memory_consumable is False  # the cluster's type is a CR_Core one
    job = SlurmJob("1", user="alice", partition="a,b", gpus=2, cpus=1)
    assert defaults.allocation(job) == (8, 0, 0, 8192, True)
    assert defaults.allocation(replace(job, partition="a")) == (2, 0, 0, 0, True)
    assert defaults.origin("a,b", "cpus_per_gpu") == "the cluster's"  # b has none of its own: the cluster's 4
    assert defaults.origin("a,b", "mem_per_gpu") == "partition b's"
    # where the partition allocates no memory, slurmctld still checks a request per node
    # against each node's memory: planned as asked
    assert defaults.allocation(replace(job, partition="c", mem_per_node=4000, mem_set=True)) == (8, 4000, 0, 0, False)
    # memory of two kinds is planned as one that covers both (agents.fit checks one kind):
    # a's shown DefMemPerCPU (500 x 2 CPUs) and b's 8192 per GPU -> 4096 per CPU
    two = replace(job, gpus=1, cpus=2, cpus_set=True, mem_per_cpu=500)
    assert JobDefaults.of({"SelectTypeParameters": "CR_CORE_MEMORY"}, parts).allocation(two) == (2, 0, 4096, 0, False)


def test_memory_of_two_kinds_is_planned_as_one_that_covers_both_on_every_node():
    """Untested, slurmctld checks the shown DefMemPerNode (100000) on each node, later 30000
    per GPU there. A ``--gpus=4`` job may split: each node needs 100000 and up to 4 x 30000,
    so 120000 per node; a ``-N 2`` one puts 2 GPUs on each: 100000."""
    defaults = JobDefaults.of({"SelectTypeParameters": "CR_CORE_MEMORY", "JobDefaults": "DefMemPerGPU=30000"})
    free = SlurmJob("1", user="alice", partition="main", gpus=4, cpus=4, cpus_set=True, mem_per_node=100000)
    assert defaults.allocation(free) == (4, 120000, 0, 0, False)
    assert defaults.allocation(replace(free, num_nodes=2)) == (4, 100000, 0, 0, False)
    assert defaults.allocation(replace(free, gpus_per_node=1, per_node_fixed=True, num_nodes=4)) == (4, 100000, 0, 0, False)
    assert defaults.allocation(replace(free, mem_per_gpu=30000)) == (4, 0, 0, 30000, False)  # tested: per GPU alone
    # a job read with no CPUs: agents.fit checks no memory per CPU for it, so per node
    cpuless = replace(free, cpus=0, cpus_set=False, mem_per_node=0, mem_per_cpu=1000)
    assert defaults.allocation(cpuless) == (0, 120000, 0, 0, False)


def test_partitions_text_is_read_where_the_json_leaves_the_defaults_out():
    """24.11's ``scontrol show partition --json`` shows ``defaults.job`` empty and gpumem's
    ``select_type`` without its memory flag (recorded); the text has both."""
    d = FIX.parent / "slurm-24.11"
    raw = {p["name"]: p for p in json.loads((d / "scontrol-show-partition.json").read_text())["partitions"]}
    assert raw["gpumem"]["defaults"]["job"] == "" and raw["gpumem"]["select_type"] == ["CORE"]
    text = {p.name: p for p in parse_partitions((d / "scontrol-show-partition.txt").read_text())}
    assert (text["gpumem"].job_defaults, text["gpumem"].select_type) == ("DefCpuPerGPU=2,DefMemPerGPU=2048", "CR_CORE_MEMORY")
    with pytest.raises(SlurmParseError, match="does not start with a record"):
        parse_partitions("Nodes=node1 Default=YES\n")
    with pytest.raises(SlurmParseError, match="without PartitionName"):
        parse_partitions("ReservationName=a\n")


def test_memory_slurm_keeps_from_jobs_is_not_free():
    """``MemSpecLimit`` (24.11's ``specialized_memory``): slurmctld keeps it from jobs."""
    rec = json.loads((FIX.parent / "slurm-24.11" / "scontrol-show-nodes.json").read_text())
    rec["nodes"] = [{**rec["nodes"][0], "specialized_memory": 4000, "alloc_memory": 60000}]
    (node,) = parse_nodes(rec)
    assert (node.real_memory, node.alloc_memory) == (60000, 60000)


def test_gpus_per_job_over_several_nodes_go_on_that_many_nodes():
    """``-N2 --gpus=4`` (job 10 of squeue-requests.json): Slurm puts at least one GPU on each
    of 2 nodes. With 4 GPUs free on node1 alone, a pin to node1 would wait for nothing, so
    the plan starts it only across two nodes; ``--gpus=5`` over 2 nodes is left to Slurm."""
    (job,) = [j for j in parse_squeue((FIX / "squeue-requests.json").read_text()).jobs if j.job_id == "10"]
    job = replace(job, user="alice", reason="Priority")
    nodes = tuple(SlurmNode(f"node{i}", "MIXED", gpus=8, gpu_type="h100", partitions=("main",), cpus=8,
                            real_memory=64000) for i in range(1, 5))

    def plan(busy):
        running = tuple(SlurmJob(f"r{i}", user="bob", state="RUNNING", gpus=len(idx), nodes=(f"node{i}",),
                                 gpu_indices={f"node{i}": idx}, start_time=NOW, time_limit=600) for i, idx in busy.items())
        built = build_state(Snapshot(SlurmVersion(22, 5, 8), NOW, (job, *running), nodes), TOPO, ["main"])
        assert [(p.job_id, p.num_nodes) for p in built.state.pending] == [("10", 2)] and not built.constrained
        return [sorted(set(TOPO.gpu_node[list(s.gpus)].tolist())) for s in make_policy("fifo+consolidate").decide(built.state).starts]

    assert plan({1: (0, 1, 2, 3), 2: tuple(range(8)), 3: tuple(range(8)), 4: tuple(range(8))}) == []
    assert plan({1: (0, 1, 2, 3), 2: (0, 1, 2, 3, 4, 5), 3: tuple(range(8)), 4: tuple(range(8))}) == [[0, 1]]
    odd = replace(job, gpus=5)
    built = build_state(Snapshot(SlurmVersion(22, 5, 8), NOW, (odd,), nodes), TOPO, ["main"])
    assert built.constrained == {"10"} and built.state.pending[0].num_nodes is None


def test_a_single_pending_array_task_is_still_an_array():
    raw = (FIX / "squeue-requests.json").read_text()
    rec = next(j for j in json.loads(raw)["jobs"] if j["job_id"] == 9)
    rec = {**rec, "array_task_string": "", "array_task_id": 3}  # the last task left in the record
    (job,) = parse_squeue(json.dumps({"meta": {}, "jobs": [rec]})).jobs
    assert job.array  # Slurm refuses ReqNodeList on it: ordered, never pinned


def test_snapshot_fills_node_capacity_and_job_requests():
    nodes = (SlurmNode("node1", "MIXED", gpus=8, gpu_type="h100", partitions=("main",), cpus=8, alloc_cpus=7,
                       real_memory=64000, alloc_memory=1000, features=("sw1",)),
             *(SlurmNode(f"node{i}", "IDLE", gpus=8, gpu_type="h100", partitions=("main",), cpus=8,
                         real_memory=64000) for i in range(2, 5)))
    jobs = (SlurmJob("1", user="alice", partition="main", gpus=1, gpus_per_node=1, per_node_fixed=True, cpus=6,
                     excluded_nodes=("node3",), features="sw1&rack1", submit_time=NOW, priority=1, reason="Priority"),
            SlurmJob("2", user="bob", partition="main", gpus=2, cpus=1, array=True, submit_time=NOW, priority=1,
                     reason="Priority"),
            SlurmJob("3", user="carol", partition="main", gpus=1, features="a|b", submit_time=NOW, priority=1,
                     reason="Priority"))
    built = build_state(Snapshot(SlurmVersion(22, 5, 8), NOW, jobs, nodes), TOPO, ["main"], avoid={"1": ("node2",)})
    cap = built.state.nodes
    assert cap is not None and cap.cpus.tolist() == [1, 8, 8, 8] and cap.mem[0] == 63000
    assert cap.idle.tolist() == [False, True, True, True] and cap.gpu_type[0] == "h100"
    assert cap.total_cpus.tolist() == [8] * 4 and cap.total_mem.tolist() == [64000] * 4
    p = {j.job_id: j for j in built.state.pending}
    assert p["1"].cpus == 6 and p["1"].exclude == ("node3", "node2") and p["1"].features == ("sw1", "rack1")
    assert built.constrained == {"2", "3"}  # an array; a feature expression the plan cannot check


def _state(free_nodes, running=(), pending=()):
    topo = uniform(4, 8, nodes_per_switch=2)
    free = np.zeros(topo.num_gpus, dtype=bool)
    for n in free_nodes:
        free[n * 8:(n + 1) * 8] = True
    for r in running:
        free[list(r.gpus)] = False
    return ClusterState(now=NOW, topology=topo, free=free, pending=tuple(pending), running=tuple(running))


def test_stable_plans_keep_last_cycles_placements():
    pending = [PendingJob("a", "alice", 2, NOW - 10), PendingJob("h", "bob", 8, NOW - 20)]
    running = [RunningJob("r1", "root", tuple(range(16, 24)), NOW - 100, NOW - 50, time_limit=100),
               RunningJob("r2", "root", tuple(range(24, 32)), NOW - 100, NOW - 50, time_limit=101)]
    state = _state([0, 1], running, pending)
    plan = Plan(order=("a", "h"), starts=(Start("a", (8, 9)),), holds=(Hold("h", tuple(range(24, 32)), NOW + 51),))
    previous = {"a": (0, 1), "h": tuple(range(16, 24))}
    kept = stabilize(plan, state, previous, margin=60)
    assert kept.starts[0].gpus == (0, 1)  # still free: not moved
    assert kept.holds[0].gpus == tuple(range(16, 24))  # back 1 s earlier, within the margin
    assert stabilize(plan, state, previous, margin=0).holds[0].gpus == tuple(range(16, 24))  # earlier anyway
    later = {"h": tuple(range(24, 32))}
    moved = Plan(order=plan.order, holds=(Hold("h", tuple(range(16, 24)), NOW + 50),))
    assert stabilize(moved, state, later, margin=0).holds[0].gpus == tuple(range(16, 24))  # 1 s later: beaten
    assert stabilize(moved, state, later, margin=5).holds[0].gpus == tuple(range(24, 32))
    busy = {"a": (16, 17)}  # last cycle's GPUs are taken now: the new start stands
    assert stabilize(plan, state, busy, margin=60).starts[0].gpus == (8, 9)


def test_a_hold_does_not_go_back_to_gpus_another_hold_takes():
    """Last cycle held A on node1; now A is planned on node0 and B on node1, both back
    within the margin. Keeping A on node1 would hold node1 twice, unless B goes back to
    node0, where it was held last cycle."""
    running = [RunningJob(f"r{i}", "root", tuple(range(8 * i, 8 * i + 8)), NOW - 100, NOW - 50, time_limit=100 + i)
               for i in range(4)]
    state = _state([], running, [PendingJob("A", "alice", 8, NOW - 10), PendingJob("B", "bob", 8, NOW - 20)])
    plan = Plan(order=("A", "B"), holds=(Hold("A", tuple(range(8)), NOW + 50), Hold("B", tuple(range(8, 16)), NOW + 51)))
    kept = stabilize(plan, state, {"A": tuple(range(8, 16))}, margin=60)
    assert [h.gpus for h in kept.holds] == [tuple(range(8)), tuple(range(8, 16))]
    alone = Plan(order=("A",), holds=plan.holds[:1])  # with node1 not wanted by another hold, A stays
    assert stabilize(alone, state, {"A": tuple(range(8, 16))}, margin=60).holds[0].gpus == tuple(range(8, 16))
    swapped = stabilize(plan, state, {"A": tuple(range(8, 16)), "B": tuple(range(8))}, margin=60)
    assert [h.gpus for h in swapped.holds] == [tuple(range(8, 16)), tuple(range(8))]  # a swap moves neither


def test_a_start_does_not_go_back_onto_a_hold_of_its_plan():
    """Last cycle A was planned on node0; now H is held on node0 (free when r0 ends) and
    backfill starts A on node1 so as not to delay H. Back on node0, A would sit in H's hold."""
    running = [RunningJob("r0", "root", (4, 5, 6, 7), NOW - 100, NOW - 50, time_limit=100),
               RunningJob("r1", "root", (12, 13, 14, 15), NOW - 100, NOW - 50, time_limit=5000),
               RunningJob("r2", "root", tuple(range(16, 32)), NOW - 100, NOW - 50, time_limit=5000)]
    state = _state([0, 1], running,
                   [PendingJob("H", "bob", 8, NOW - 20, time_limit=3600, num_nodes=1),
                    PendingJob("A", "alice", 2, NOW - 10, time_limit=3600)])
    plan = make_policy("fifo+consolidate+backfill").decide(state)
    assert [h.gpus for h in plan.holds] == [tuple(range(8))] and plan.starts[0].gpus[0] >= 8
    assert stabilize(plan, state, {"A": (0, 1)}, margin=60).starts == plan.starts
    assert stabilize(replace(plan, holds=()), state, {"A": (0, 1)}, margin=60).starts[0].gpus == (0, 1)


def test_a_start_goes_back_only_where_it_fits_beside_the_other_starts():
    """B takes 6 of node0's 8 CPUs (or node0 whole); A (4 CPUs) was on node0 last cycle and
    no longer fits there beside B."""
    cap = NodeCapacity(cpus=np.array([8, 8]), mem=np.array([10**6] * 2), idle=np.array([True, True]),
                       gpu_type=("", ""), features=(frozenset(), frozenset()))
    topo = uniform(2, 8, nodes_per_switch=2)
    for exclusive, cpus in ((False, 6), (True, 1), (False, 4)):
        b = PendingJob("B", "bob", 2, NOW - 20, cpus=cpus, exclusive=exclusive)
        a = PendingJob("A", "alice", 2, NOW - 10, cpus=4)
        state = ClusterState(now=NOW, topology=topo, free=np.ones(16, bool), pending=(b, a), running=(), nodes=cap)
        plan = Plan(order=("B", "A"), starts=(Start("B", (0, 1)), Start("A", (8, 9))))
        back = stabilize(plan, state, {"A": (2, 3)}, margin=60).starts[1].gpus
        assert back == ((2, 3) if cpus == 4 else (8, 9)), (exclusive, cpus)


def test_a_hold_goes_back_only_where_the_held_job_can_start():
    """H (2 GPUs, 6 CPUs, h100) was held on node0 last cycle and is planned on node1 now,
    node1 back 1 s later. Once r0 ends node0 has 2 free CPUs (a CPU job keeps the rest), or
    node0's GPUs are a100s: H could never start there, so the hold stays on node1."""
    topo = uniform(2, 8, nodes_per_switch=2)
    running = (RunningJob("r0", "root", (0, 1), NOW - 100, NOW - 50, time_limit=100, cpus=2),
               RunningJob("r1", "root", (8, 9), NOW - 100, NOW - 50, time_limit=101, cpus=2))
    free = np.ones(16, bool)
    free[[0, 1, 8, 9]] = False
    held = PendingJob("H", "bob", 2, NOW - 20, cpus=6, gpu_type="h100")
    plan = Plan(order=("H",), holds=(Hold("H", (8, 9), NOW + 51),))
    for cpus0, type0, back in ((6, "h100", True), (0, "h100", False), (6, "a100", False)):
        cap = NodeCapacity(cpus=np.array([cpus0, 6]), mem=np.array([10**6] * 2), idle=np.array([False, False]),
                           gpu_type=(type0, "h100"), features=(frozenset(), frozenset()))
        state = ClusterState(now=NOW, topology=topo, free=free, pending=(held,), running=running, nodes=cap)
        kept = stabilize(plan, state, {"H": (0, 1)}, margin=60).holds[0].gpus
        assert kept == ((0, 1) if back else (8, 9)), (cpus0, type0)


def test_a_kept_hold_shares_no_node_with_an_exclusive_hold():
    """X was held on node0 last cycle; now X is planned on node1 and Y on node0. Either one
    exclusive, X back on node0 would share the node with Y, and one of them could start
    only after the other ended."""
    topo = uniform(2, 8, nodes_per_switch=2)
    running = (RunningJob("r0", "root", tuple(range(8)), NOW - 100, NOW - 50, time_limit=100),
               RunningJob("r1", "root", tuple(range(8, 16)), NOW - 100, NOW - 50, time_limit=101))
    cap = NodeCapacity(cpus=np.array([64, 64]), mem=np.array([10**6] * 2), idle=np.array([False, False]),
                       gpu_type=("", ""), features=(frozenset(), frozenset()))
    plan = Plan(order=("X", "Y"), holds=(Hold("X", (8, 9), NOW + 51), Hold("Y", (2, 3), NOW + 50)))
    for x_excl, y_excl, back in ((False, False, True), (True, False, False), (False, True, False)):
        pending = (PendingJob("X", "bob", 2, NOW - 20, exclusive=x_excl), PendingJob("Y", "amy", 2, NOW - 10, exclusive=y_excl))
        state = ClusterState(now=NOW, topology=topo, free=np.zeros(16, bool), pending=pending, running=running, nodes=cap)
        kept = stabilize(plan, state, {"X": (0, 1)}, margin=60).holds
        assert [h.gpus for h in kept] == [(0, 1) if back else (8, 9), (2, 3)], (x_excl, y_excl)


def test_the_hold_chain_holds_the_next_jobs_where_they_would_start():
    running = [RunningJob(f"r{i}", "root", tuple(range(8 * i, 8 * i + 8)), NOW - 100, NOW - 50, time_limit=100 + 10 * i)
               for i in range(4)]
    pending = [PendingJob(j, "alice", g, NOW - k) for k, (j, g) in enumerate((("a", 8), ("b", 4), ("c", 4), ("d", 8)))]
    state = _state([], running, pending)
    plan = Plan(order=("a", "b", "c", "d"), holds=(Hold("a", tuple(range(8)), NOW + 50),))
    chained = chain_holds(plan, state, depth=2)
    assert [h.job_id for h in chained.holds] == ["a", "b", "c"]
    gpus = [set(h.gpus) for h in chained.holds]
    assert not (gpus[0] & gpus[1]) and not (gpus[1] & gpus[2])
    assert [h.expected_start for h in chained.holds] == sorted(h.expected_start for h in chained.holds)
    assert chain_holds(plan, state, depth=0) is plan


def test_idle_watch_measures_how_long_jobs_fit_without_starting():
    pending = [PendingJob("a", "alice", 2, NOW - 10)]
    watch = IdleWatch()
    state = _state([0], (), pending)
    assert watch.note(state) == (1, 0.0)
    later = ClusterState(now=NOW + 30, topology=state.topology, free=state.free, pending=state.pending)
    assert watch.note(later) == (1, 30.0)
    full = ClusterState(now=NOW + 40, topology=state.topology, free=np.zeros_like(state.free), pending=state.pending)
    assert watch.note(full) == (0, 0.0)


class _Log:
    def __init__(self):
        self.lines = []

    def warning(self, event, **kw):
        self.lines.append((event, kw))

    info = warning


def test_a_planned_start_slurm_evaluated_and_refused_is_a_stall(tmp_path):
    journal = Journal.in_state_dir(tmp_path)
    log = _Log()
    tracker = PlacementTracker(journal, Metrics(), log)
    nodes = tuple(SlurmNode(f"node{i}", "IDLE", gpus=8, partitions=("main",)) for i in range(1, 5))

    def snap(t, reason, evaluated):
        job = SlurmJob("7", user="alice", partition="main", gpus=1, required_nodes=("node2",), reason=reason,
                       submit_time=NOW, priority=2_000_000, last_evaluated=evaluated)
        return Snapshot(SlurmVersion(22, 5, 8), t, (job,), nodes)

    first = snap(NOW, "Priority", NOW - 5)
    tracker.record_planned("c1", {"7": (8,)}, build_state(first, TOPO, ["main"]))
    assert tracker.find_stalls(snap(NOW + 2, "Priority", NOW + 1), 300, 3600) == []  # behind a higher job
    assert tracker.find_stalls(snap(NOW + 2, "Resources", NOW - 1), 300, 3600) == []  # not evaluated since
    (stall,) = tracker.find_stalls(snap(NOW + 4, "Resources", NOW + 3), 300, 3600)
    assert stall.nodes == ("node2",) and tracker.avoid() == {"7": ("node2",)}
    assert log.lines[-1][0] == "placement.stalled"
    assert tracker.find_stalls(snap(NOW + 400, "Priority", NOW + 399), 300, 3600) == [] and tracker.avoid() == {}
    journal.close()


def test_state_dir_journal_and_status_are_private(tmp_path):
    from attentived.daemon.status import write_status

    state = tmp_path / "state"
    journal = Journal.in_state_dir(state)
    journal.close()
    write_status(state, {"ok": True}, _Log())
    assert state.stat().st_mode & 0o777 == 0o700
    assert (state / "journal.sqlite").stat().st_mode & 0o777 == 0o600
    assert (state / "status.json").stat().st_mode & 0o777 == 0o600


def test_apscheduler_skip_flood_is_folded():
    import io
    import logging

    from attentived.daemon import log as dlog
    from attentived.daemon import service

    out = io.StringIO()
    dlog.configure(level="info", fmt="json", stream=out)
    try:
        handler = service._StdlibToStructlog()
        skip = 'Execution of job "cycle" skipped: maximum number of running instances reached (1)'
        for _ in range(30):
            handler.emit(logging.LogRecord("apscheduler", logging.WARNING, __file__, 1, skip, (), None))
        handler.emit(logging.LogRecord("apscheduler", logging.WARNING, __file__, 1, "other", (), None))
    finally:
        dlog.configure()  # stderr again, for the tests that follow
    events = [json.loads(line)["event"] for line in out.getvalue().splitlines()]
    assert events == [skip, "other"]  # the other 29 are folded until the minute is up
