"""What Slurm checks besides free GPUs (`attentived.agents.fit`), and every policy honouring it.

The lab cluster: 4 nodes x 8 GPUs (islands 0-3 and 4-7), node1+node2 under one switch,
node3+node4 under another. Node n's GPUs are 8(n-1) .. 8(n-1)+7.
"""

from __future__ import annotations

import numpy as np
import pytest

from attentived.agents.behind_wait import fill_behind_wait
from attentived.agents.features import Context, FeatureEncoder, candidates
from attentived.agents.fit import Fit
from attentived.agents.learned import load_learned
from attentived.agents.order import Fifo
from attentived.agents.placement import Consolidate, FirstFit, LoadBalance, RandomPlacer
from attentived.agents.policy import Scheduler, expected_hold
from attentived.agents.registry import make_policy
from attentived.agents.state import ClusterState, PendingJob
from attentived.agents.two_phase import _started

from .conftest import RunningJob, capacity, job, make_state

PLACERS = [FirstFit(), Consolidate(), LoadBalance(), RandomPlacer(seed=5)]


def nodes_of(topo, gpus) -> set[int]:
    return {int(n) for n in topo.gpu_node[list(gpus)]}


def check_slurm_accepts(state: ClusterState, plan) -> None:
    """Replay the plan's starts against the snapshot's node capacity as slurmctld would:
    CPUs and memory per node (a job's CPUs in proportion to its GPUs there, rounded up),
    ``--exclusive`` only on nodes where nothing runs (and then nothing else joins), GPU
    type, features, ``-x``, and every ``-w`` node among the job's nodes."""
    topo, cap = state.topology, state.nodes
    assert cap is not None
    cpus, mem = cap.cpus.copy(), cap.mem.copy()
    size = np.diff(topo.node_first_gpu)
    busy = ~cap.idle | (np.bincount(topo.gpu_node, weights=state.free, minlength=len(topo.nodes)) < size)
    whole = np.zeros(len(topo.nodes), bool)
    free = state.free.copy()
    pending = {j.job_id: j for j in state.pending}
    for st in plan.starts:
        j = pending[st.job_id]
        assert len(st.gpus) == j.num_gpus and free[list(st.gpus)].all(), st
        nodes, per = np.unique(topo.gpu_node[list(st.gpus)], return_counts=True)
        names = {topo.nodes[n].name for n in nodes}
        assert set(j.nodelist) <= names, (st, "-w")
        for n, g in zip(nodes.tolist(), per.tolist()):
            need = -(-j.cpus * g // j.num_gpus)
            need_mem = j.mem_per_node or j.mem_per_cpu * need or j.mem_per_gpu * g
            assert need <= cpus[n] and need_mem <= mem[n], (st, n, need, cpus[n], need_mem, mem[n])
            assert not j.gpu_type or cap.gpu_type[n] == j.gpu_type, (st, n)
            assert set(j.features) <= cap.features[n], (st, n)
            assert topo.nodes[n].name not in j.exclude, (st, n)
            assert not whole[n], (st, n, "joins a node held whole")
            assert not (j.exclusive and busy[n]), (st, n, "exclusive on a busy node")
            cpus[n] -= cpus[n] if j.exclusive else need
            mem[n] -= mem[n] if j.exclusive else need_mem
            busy[n] = True
            whole[n] |= j.exclusive
        free[list(st.gpus)] = False


# ---- the fast path ----


def test_a_job_asking_only_for_gpus_costs_nothing(lab):
    s = make_state(lab, [job("a", 4)], busy=[0, 1])
    fit = Fit.of(s)
    assert fit.usable(s.pending[0], s.free) is s.free
    assert fit.take(s.pending[0], (8, 9, 10, 11)) == (8, 9, 10, 11)
    cpus_only = job("b", 2, cpus=8)  # nothing to count CPUs against: GPUs are the only limit
    assert fit.usable(cpus_only, s.free) is s.free
    with_nodes = make_state(lab, [job("a", 4)], nodes=capacity(lab, cpus=1))
    assert Fit.of(with_nodes).usable(with_nodes.pending[0], with_nodes.free) is with_nodes.free


def test_node_capacity_must_describe_every_node(lab):
    with pytest.raises(ValueError, match="3 nodes, the cluster has 4"):
        Fit(lab, capacity(lab, cpus=[8, 8, 8]))


# ---- CPUs and memory ----


@pytest.mark.parametrize("placer", PLACERS, ids=lambda p: p.name)
def test_a_cpu_starved_node_is_skipped(lab, placer):
    # node1 has every GPU free but one CPU left: a -c 6 job goes elsewhere.
    s = make_state(lab, [job("a", cpus=6)], nodes=capacity(lab, cpus=[1, 16, 16, 16]))
    usable = Fit.of(s).usable(s.pending[0], s.free)
    assert not usable[:8].any() and usable[8:].all()
    (start,) = Scheduler(Fifo(), placer).decide(s).starts
    assert nodes_of(lab, start.gpus) != {0}


@pytest.mark.parametrize("placer", PLACERS, ids=lambda p: p.name)
def test_four_six_cpu_jobs_on_eight_cpu_nodes_go_to_four_nodes(lab, placer):
    s = make_state(lab, [job(f"j{i}", cpus=6, submit=i) for i in range(4)], nodes=capacity(lab, cpus=8))
    plan = Scheduler(Fifo(), placer).decide(s)
    assert len(plan.starts) == 4
    assert sorted(n for st in plan.starts for n in nodes_of(lab, st.gpus)) == [0, 1, 2, 3]
    check_slurm_accepts(s, plan)


@pytest.mark.parametrize("backfill", [False, True])
def test_a_job_short_of_cpus_is_held_where_they_come_back(lab, backfill):
    # node4 has 7 free GPUs but r holds all 8 of its CPUs until t=1500: the fourth -c 6
    # job is held there for then, not started now (GPU counts alone would start it).
    running = [RunningJob("r", "x", (31,), 0.0, 900.0, 600.0, cpus=8)]
    pending = [job(f"j{i}", cpus=6, submit=i) for i in range(5)]
    s = make_state(lab, pending, running=running, nodes=capacity(lab, cpus=[8, 8, 8, 0]))
    plan = Scheduler(Fifo(), Consolidate(), backfill=backfill).decide(s)
    assert [st.job_id for st in plan.starts] == ["j0", "j1", "j2"]
    (hold,) = plan.holds
    assert hold.job_id == "j3" and hold.expected_start == 1500.0 and nodes_of(lab, hold.gpus) == {3}


def test_memory_per_node_and_per_cpu(lab):
    mem = capacity(lab, mem=[50_000, 200_000, 30_000, 200_000])
    s = make_state(lab, nodes=mem)
    fit = Fit.of(s)
    per_node = fit.usable(job("a", mem_per_node=100_000), s.free)
    assert nodes_of(lab, np.flatnonzero(per_node)) == {1, 3}
    per_cpu = fit.usable(job("b", cpus=4, mem_per_cpu=10_000), s.free)  # 40 GB on its node
    assert nodes_of(lab, np.flatnonzero(per_cpu)) == {0, 1, 3}
    # Two GPUs of an 8-CPU job take 8 CPUs x 10 GB: only nodes with 80 GB keep two GPUs.
    two = fit.usable(job("c", 2, cpus=8, mem_per_cpu=10_000), s.free)
    assert np.bincount(lab.gpu_node[two], minlength=4).tolist() == [1, 8, 0, 8]
    fit.take(job("d", 1, cpus=1, mem_per_cpu=150_000), (8,))
    assert fit.mem is not None and fit.mem.tolist() == [50_000, 50_000, 30_000, 200_000]
    assert nodes_of(lab, np.flatnonzero(fit.usable(job("a", mem_per_node=100_000), s.free))) == {3}


def test_a_node_keeps_only_the_gpus_its_cpus_allow_from_its_fullest_island(lab):
    # node1: GPUs 0 and 4-7 free, 4 CPUs left: a 4-GPU job with 2 CPUs per GPU may take
    # two GPUs there, and they should share island 4-7.
    s = make_state(lab, busy=[1, 2, 3], nodes=capacity(lab, cpus=[4, 64, 64, 64]))
    usable = Fit.of(s).usable(job("a", 4, cpus=8), s.free)
    assert np.flatnonzero(usable[:8]).tolist() == [4, 5]
    assert usable[8:].all()


def test_a_fixed_shape_needs_its_share_on_each_node(lab):
    # 2 nodes x 4 GPUs, 8 CPUs per node: node1 (4 CPUs) cannot take a share, node2 can.
    s = make_state(lab, [job("a", 8, nodes=2, cpus=16)], nodes=capacity(lab, cpus=[4, 8, 64, 64]))
    usable = Fit.of(s).usable(s.pending[0], s.free)
    assert not usable[:8].any() and usable[8:].all()
    for placer in PLACERS:
        (start,) = Scheduler(Fifo(), placer).decide(s).starts
        per = np.bincount(lab.gpu_node[list(start.gpus)], minlength=4)
        assert per[0] == 0 and sorted(per[per > 0]) == [4, 4], placer.name
    tight = make_state(lab, [job("a", 8, nodes=2, cpus=16)], nodes=capacity(lab, cpus=[4, 8, 4, 4]))
    assert Scheduler(Fifo(), Consolidate()).decide(tight).starts == ()


def test_memory_per_gpu(lab):
    """``--mem-per-gpu`` (or the site's ``DefMemPerGPU``): a node keeps as many of the
    job's GPUs as its free memory pays for, and a start books that much per GPU there."""
    s = make_state(lab, nodes=capacity(lab, mem=[50_000, 200_000, 15_000, 100_000]))
    fit = Fit.of(s)
    four = fit.usable(job("a", 4, mem_per_gpu=20_000), s.free)  # 80 GB on one node, or split
    assert np.bincount(lab.gpu_node[four], minlength=4).tolist() == [2, 8, 0, 8]  # node4 could take all four
    assert fit.started(job("b", 3, mem_per_gpu=20_000), (24, 25, 8), now=0.0).mem == 60_000
    assert fit.mem is not None and fit.mem.tolist() == [50_000, 180_000, 15_000, 60_000]
    assert nodes_of(lab, np.flatnonzero(fit.usable(job("c", 4, nodes=1, mem_per_gpu=20_000), s.free))) == {1}


def test_jobs_asking_alike_but_for_their_memory_per_gpu_are_told_apart(lab):
    """The plan numbers alike requests once per snapshot (`ClusterState.irregular_requests`):
    memory per GPU is part of a request, or a job that cannot fit would share the verdict
    of one that can."""
    s = make_state(lab, [job("big", 4, nodes=1, mem_per_gpu=40_000), job("small", 4, submit=1.0, nodes=1, mem_per_gpu=1_000)],
                   nodes=capacity(lab, mem=100_000))
    assert len(set(s.irregular_requests.tolist())) == 2
    assert Context.of(s).feasible.tolist() == [False, True]


def test_take_books_cpus_in_proportion_to_gpus_and_release_gives_them_back(lab):
    s = make_state(lab, nodes=capacity(lab, cpus=16, mem=64_000))
    fit = Fit.of(s)
    j = job("j", 4, cpus=8, mem_per_cpu=1000)
    run = fit.started(j, (0, 1, 2, 8), now=5.0)  # 6 CPUs on node1, 2 on node2
    assert fit.cpus is not None and fit.mem is not None and fit.idle is not None
    assert fit.cpus.tolist() == [10, 14, 16, 16] and fit.mem.tolist() == [58_000, 62_000, 64_000, 64_000]
    assert fit.idle.tolist() == [False, False, True, True]
    assert (run.gpus, run.cpus, run.mem, run.start_time) == ((0, 1, 2, 8), 8, 8000, 5.0)
    assert s.nodes is not None and s.nodes.cpus.tolist() == [16] * 4  # the snapshot is untouched
    assert fit.release(run) == (0, 1, 2, 8)
    assert fit.cpus.tolist() == [16] * 4 and fit.mem.tolist() == [64_000] * 4


# ---- --exclusive ----


def test_exclusive_only_on_idle_nodes_and_it_takes_the_node(lab):
    # node1 runs a GPU job, node2 runs a CPU-only job (not idle, every GPU free), node3 is
    # idle with one GPU down, node4 is idle: only node4 can take an exclusive job.
    running = [RunningJob("r", "x", (0,), 0.0, 900.0, 600.0, cpus=1)]
    cap = capacity(lab, cpus=32, idle=[False, False, True, True])
    s = make_state(lab, [job("x", 2, exclusive=True), job("b", 1, submit=1)], busy=[16], running=running, nodes=cap)
    usable = Fit.of(s).usable(s.pending[0], s.free)
    assert nodes_of(lab, np.flatnonzero(usable)) == {3}
    for placer in PLACERS:
        plan = Scheduler(Fifo(), placer).decide(s)
        x, b = plan.starts
        assert nodes_of(lab, x.gpus) == {3} and 3 not in nodes_of(lab, b.gpus), placer.name
        check_slurm_accepts(s, plan)
    fit = Fit.of(s)
    assert fit.take(s.pending[0], (24, 25)) == tuple(range(24, 32))  # the whole node
    assert fit.cpus is not None and fit.cpus[3] == 0


def test_exclusive_without_node_capacity_takes_a_wholly_free_node(lab):
    s = make_state(lab, [job("x", 2, exclusive=True), job("b", 4, submit=1)], busy=[0, 9])
    plan = Scheduler(Fifo(), Consolidate()).decide(s)
    x, b = plan.starts
    assert nodes_of(lab, x.gpus) <= {2, 3} and not nodes_of(lab, x.gpus) & nodes_of(lab, b.gpus)


def test_a_hold_for_an_exclusive_job_waits_for_a_whole_node(lab):
    running = [RunningJob(f"r{n}", "x", (8 * n,), 0.0, 900.0, 100.0 * (n + 1)) for n in range(4)]
    s = make_state(lab, [job("x", 2, exclusive=True)], running=running)
    (hold,) = Scheduler(Fifo(), Consolidate()).decide(s).holds
    assert hold.expected_start == 1000.0 and nodes_of(lab, hold.gpus) == {0}


def test_a_hold_for_an_exclusive_job_keeps_its_whole_node_from_the_jobs_behind(lab):
    """x is held on node1 (its GPUs 0-3 back at 600 s): a long job must not backfill onto
    node1's free half, or the node is not idle at 600 s and x cannot start (EASY's promise).
    The same for the rule behind a WAIT and for the packing rule."""
    running = [RunningJob("r1", "x", (0, 1, 2, 3), 0.0, 0.0, 600.0), RunningJob("r2", "x", tuple(range(8, 32)), 0.0, 0.0, 3600.0)]
    s = make_state(lab, [job("x", 4, exclusive=True), job("long", 4, submit=1, limit=7200.0)], running=running, now=0.0)
    for name in ("fifo+consolidate+backfill", "fifo+consolidate:pack=1"):
        plan = make_policy(name).decide(s)
        assert [h.job_id for h in plan.holds] == ["x"] and plan.starts == (), name
    hold = Scheduler(Fifo(), Consolidate(), backfill=True).decide(s).holds[0]
    assert fill_behind_wait(s, s.pending, hold) == []
    short = make_state(lab, [job("x", 4, exclusive=True), job("short", 4, submit=1, limit=300.0)], running=running, now=0.0)
    assert [st.job_id for st in make_policy("fifo+consolidate+backfill").decide(short).starts] == ["short"]


def test_a_hold_keeps_the_cpus_its_job_needs_from_the_jobs_behind(lab):
    """node1: r1 holds GPUs 0-1 and 32 of its 64 CPUs until 600 s. big (4 GPUs) needs more
    CPUs than are free now and is held there; a long job may take node1's other free GPUs
    only if big still gets its CPUs at 600 s; a short one (gone by then) regardless."""
    running = [RunningJob("r1", "x", (0, 1), 0.0, 0.0, 600.0, cpus=32),
               RunningJob("r2", "x", tuple(range(8, 32)), 0.0, 0.0, 3600.0, cpus=192)]
    cap = capacity(lab, cpus=[32, 0, 0, 0], idle=False)
    for need, starts in ((56, []), (48, ["long"])):  # 64 - 16 CPUs of long: 48 left at 600 s
        pending = [job("big", 4, cpus=need), job("long", 2, submit=1, limit=7200.0, cpus=16)]
        s = make_state(lab, pending, running=running, now=0.0, nodes=cap)
        for name in ("fifo+consolidate+backfill", "fifo+consolidate:pack=1"):
            plan = make_policy(name).decide(s)
            assert [h.job_id for h in plan.holds] == ["big"] and [st.job_id for st in plan.starts] == starts, (name, need)
            assert plan.holds[0].expected_start == 600.0
        assert [st.job_id for st in fill_behind_wait(s, s.pending, plan.holds[0])] == starts
    short = make_state(lab, [job("big", 4, cpus=56), job("short", 2, submit=1, limit=300.0, cpus=16)], running=running,
                       now=0.0, nodes=cap)
    assert [st.job_id for st in make_policy("fifo+consolidate+backfill").decide(short).starts] == ["short"]


def test_a_running_exclusive_job_gives_its_whole_node_back(lab):
    # x holds node1 whole (its GPUs 0-1, the rest unusable): a 6-GPU job is held for it.
    running = [RunningJob("x", "x", (0, 1), 0.0, 900.0, 300.0, exclusive=True),
               RunningJob("r", "x", tuple(range(8, 32)), 0.0, 900.0, 9000.0)]
    s = make_state(lab, [job("a", 6)], busy=range(2, 8), running=running)
    hold = expected_hold(s.pending[0], s.free, s, Consolidate())
    assert hold is not None and hold.expected_start == 1200.0 and nodes_of(lab, hold.gpus) == {0}


# ---- GPU type, features, -w, -x ----


def _described(lab):
    return capacity(lab, gpu_type=["a100", "a100", "h100", "h100"],
                    features=[("ib",), ("ib", "nvme"), ("nvme",), ("ib", "nvme")])


@pytest.mark.parametrize(("requests", "allowed"), [
    ({"gpu_type": "h100"}, {2, 3}),
    ({"gpu_type": "v100"}, set()),
    ({"features": ("ib", "nvme")}, {1, 3}),
    ({"nodelist": ("node3",)}, {2}),
    ({"nodelist": ("node9",)}, set()),  # a node the cluster lacks
    ({"exclude": ("node1", "node4")}, {1, 2}),
    ({"gpu_type": "a100", "exclude": ("node2",)}, {0}),
])  # fmt: skip
def test_type_features_nodelist_and_exclude(lab, requests, allowed):
    s = make_state(lab, nodes=_described(lab))
    j = job("a", 2, **requests)
    assert nodes_of(lab, np.flatnonzero(Fit.of(s).usable(j, s.free))) == allowed
    with_job = make_state(lab, [j], nodes=_described(lab))
    for placer in PLACERS:
        starts = Scheduler(Fifo(), placer).decide(with_job).starts
        assert [nodes_of(lab, st.gpus) <= allowed for st in starts] == ([True] if allowed else [])


def test_without_node_descriptions_type_and_features_are_not_checked_but_w_and_x_are(lab):
    s = make_state(lab)
    fit = Fit.of(s)
    assert fit.usable(job("a", gpu_type="h100", features=("ib",)), s.free).all()
    assert nodes_of(lab, np.flatnonzero(fit.usable(job("b", nodelist=("node2",)), s.free))) == {1}
    assert nodes_of(lab, np.flatnonzero(fit.usable(job("c", exclude=("node2",)), s.free))) == {0, 2, 3}


def test_a_nodelist_of_several_nodes_is_covered_whole(lab):
    # Slurm runs a -w node1,node3 job on both: a 3-GPU job gets an exact set touching each.
    s = make_state(lab, [job("w", 3, nodelist=("node1", "node3"))], busy=[0, 1, 2, 3, 4])
    usable = Fit.of(s).usable(s.pending[0], s.free)
    assert int(usable.sum()) == 3 and nodes_of(lab, np.flatnonzero(usable)) == {0, 2}
    for placer in PLACERS:
        (start,) = Scheduler(Fifo(), placer).decide(s).starts
        assert nodes_of(lab, start.gpus) == {0, 2}, placer.name
    shaped = job("s", 4, nodes=2, nodelist=("node2", "node4"))
    assert nodes_of(lab, np.flatnonzero(Fit.of(s).usable(shaped, s.free))) == {1, 3}
    too_few = job("t", 8, nodes=2, nodelist=("node2",))  # would need a node beyond its list
    assert not Fit.of(s).usable(too_few, s.free).any()


def test_static_masks_are_kept_per_request(lab):
    s = make_state(lab, nodes=_described(lab))
    fit = Fit.of(s)
    a, b = job("a", gpu_type="h100"), job("b", 3, gpu_type="h100")
    assert fit._static(a) is fit._static(b) is Fit.of(_started_state(s))._static(a)
    assert not fit._static(a).flags.writeable


def _started_state(s: ClusterState) -> ClusterState:
    return _started(make_state(s.topology, [job("z")], nodes=s.nodes), 0, (0,))


# ---- the learned agents ----


def test_started_carries_the_capacity_forward(lab):
    s = make_state(lab, [job("a", 2, cpus=6, mem_per_node=1000), job("x", 1, exclusive=True)], nodes=capacity(lab, cpus=16))
    after = _started(s, 0, (0, 1))
    assert after.nodes is not None and after.nodes.cpus.tolist() == [10, 16, 16, 16]
    assert after.nodes.mem.tolist() == [511_000] + [512_000] * 3 and after.nodes.idle.tolist() == [False, True, True, True]
    (run,) = after.running
    assert (run.gpus, run.cpus, run.mem) == ((0, 1), 6, 1000)
    whole = _started(after, 0, (9,))  # x: node2 whole
    assert not whole.free[8:16].any() and whole.running[-1].gpus == tuple(range(8, 16))
    assert whole.nodes is not None and whole.nodes.cpus[1] == 0


def test_context_feasibility_and_candidates_follow_the_usable_gpus(lab):
    cap = capacity(lab, cpus=[2, 2, 2, 12])
    s = make_state(lab, [job("fits", 1, cpus=2), job("big", 2, cpus=12), job("never", 1, cpus=13),
                         job("typed", gpu_type="h100")], nodes=cap)
    ctx = Context.of(s)
    assert ctx.feasible.tolist() == [True, True, False, False]
    for c in candidates(s.pending[1], ctx):
        assert nodes_of(lab, c.gpus) == {3}
    assert candidates(s.pending[2], ctx) == []
    assert FeatureEncoder().jobs(ctx).feasible[:4].tolist() == [True, True, False, False]


def _random_constrained_state(lab, seed: int) -> ClusterState:
    rng = np.random.default_rng(seed)
    busy = sorted(rng.choice(32, size=int(rng.integers(0, 20)), replace=False).tolist())
    running = [RunningJob(f"r{g}", "bob", (g,), 0.0, 500.0, float(rng.choice([600.0, 7200.0])), cpus=int(rng.integers(0, 4)))
               for g in busy]
    per_node = np.bincount(lab.gpu_node[busy], minlength=4) if busy else np.zeros(4, int)
    cap = capacity(
        lab,
        cpus=[int(x) for x in rng.integers(0, 24, size=4)],
        mem=[int(x) for x in rng.choice([8_000, 64_000, 256_000], size=4)],
        idle=[bool(n == 0) for n in per_node],
        gpu_type=["a100", "a100", "h100", "h100"],
        features=[("ib",), ("ib", "nvme"), ("nvme",), ("ib", "nvme")],
    )
    pending = []
    for i in range(int(rng.integers(5, 25))):
        requests: dict = {"cpus": int(rng.choice([0, 1, 2, 4, 6, 12]))}
        kind = int(rng.integers(0, 9))
        if kind == 0:
            requests["exclusive"] = True
        elif kind == 1:
            requests["gpu_type"] = str(rng.choice(["a100", "h100"]))
        elif kind == 2:
            requests["features"] = ("nvme",)
        elif kind == 3:
            requests["exclude"] = (f"node{int(rng.integers(1, 5))}",)
        elif kind == 4:
            requests["nodelist"] = (f"node{int(rng.integers(1, 5))}",)
        elif kind == 5:
            requests["mem_per_cpu"] = 16_000
        elif kind == 7:
            requests["mem_per_gpu"] = 20_000
        gpus = int(rng.choice([1, 1, 1, 2, 4, 8]))
        if kind == 6:
            gpus, requests["num_nodes"] = int(rng.choice([2, 4, 8])), 2
        pending.append(PendingJob(f"j{i}", str(rng.choice(["ann", "bo", "cy"])), gpus, float(i), 3600.0, **requests))
    return make_state(lab, pending, running=running, nodes=cap)


@pytest.mark.parametrize("agent", ["attentive", "deeprm", "proximity-drl"])
def test_learned_agents_never_start_a_job_where_slurm_would_refuse_it(lab, agent):
    policy = load_learned(agent)
    started = 0
    for seed in range(12):
        s = _random_constrained_state(lab, seed)
        plan = policy.decide(s)
        check_slurm_accepts(s, plan)
        started += len(plan.starts)
    assert started >= 20  # the check saw real plans, not empty ones


def test_the_attentive_agent_spreads_six_cpu_jobs_over_eight_cpu_nodes(lab):
    s = make_state(lab, [job(f"j{i}", cpus=6, submit=i) for i in range(4)], nodes=capacity(lab, cpus=8))
    plan = load_learned("attentive").decide(s)
    assert sorted(n for st in plan.starts for n in nodes_of(lab, st.gpus)) == [0, 1, 2, 3]
    check_slurm_accepts(s, plan)


@pytest.mark.parametrize("placer", PLACERS, ids=lambda p: p.name)
def test_heuristic_plans_pass_slurm_s_checks(lab, placer):
    for seed in range(12):
        s = _random_constrained_state(lab, seed)
        check_slurm_accepts(s, Scheduler(Fifo(), placer, backfill=True).decide(s))
