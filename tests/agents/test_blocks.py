"""Every policy keeps to Slurm's block topology: under ``topology/block`` slurmctld refuses
a job pinned across blocks the size it needs, or to nodes in no block, so a plan that did
so would leave GPUs idle until the pin is found stalled (`topology.blocks`)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from attentived.agents import policy as policy_module
from attentived.agents.fit import Fit
from attentived.agents.pack import PackedPlacer
from attentived.agents.placement import Consolidate, FirstFit, LoadBalance, RandomPlacer
from attentived.agents.policy import expected_hold
from attentived.agents.registry import ALL, make_policy, unsupported
from attentived.agents.slurm_select import SlurmSelectPlacer
from attentived.agents.state import PendingJob
from attentived.topology import parse_topology_conf, topology_from_slurm

from ..topology.test_blocks import lab8
from .conftest import RunningJob, capacity, job, make_state


def accepted(topo, gpus) -> bool:
    return topo.blocks.allows(topo.node_block, np.unique(topo.gpu_node[list(gpus)]))


def random_state(topo, seed):
    """node1-8 x 8 GPUs in blocks of two nodes (BlockSizes=2,4): running jobs on random
    GPUs, a queue of 1 to 40 GPUs (some with a node count)."""
    rng = np.random.default_rng(seed)
    busy = rng.permutation(topo.num_gpus)[: int(rng.integers(0, topo.num_gpus - 8))]
    running = [RunningJob(f"r{i}", "x", (int(g),), 0.0, 0.0, float(rng.integers(100, 5000))) for i, g in enumerate(busy)]
    pending = []
    for i in range(int(rng.integers(3, 12))):
        gpus = int(rng.choice([1, 2, 4, 8, 12, 16, 24, 40]))
        nodes = int(rng.choice([2, 3])) if gpus in (16, 24) and rng.random() < 0.4 else None
        pending.append(PendingJob(f"j{i}", str(rng.choice(["ann", "bo", "cy"])), gpus, float(i), 3600.0,
                                  num_nodes=nodes if nodes is None or gpus % nodes == 0 else None))
    return make_state(topo, pending, running=running)


NAMES = [*ALL, "fifo+consolidate+backfill", "sjf+consolidate:pack=1", "attentive:pack=1", "portfolio:one_node=1"]


@pytest.mark.parametrize("name", NAMES)
def test_no_policy_starts_or_holds_a_job_where_slurmctld_refuses_it(name):
    topo = lab8()
    policy = make_policy(name, seed=3)
    if unsupported(policy, topo):
        pytest.skip(unsupported(policy, topo))
    starts = multi = 0
    for seed in range(10):
        plan = policy.decide(random_state(topo, seed))
        for placed in (*plan.starts, *plan.holds):
            assert accepted(topo, placed.gpus), (name, seed, placed)
        starts += len(plan.starts)
        multi += sum(len(set(topo.gpu_node[list(st.gpus)].tolist())) > 1 for st in plan.starts)
    assert starts >= 10 and multi >= 1, (starts, multi)  # real plans, jobs over several nodes among them


def test_a_job_waits_rather_than_span_blocks():
    """16 GPUs free, 8 on node2 (b1) and 8 on node3 (b2): a 16-GPU job would take both,
    which slurmctld refuses; it is held instead, and starts where one block frees."""
    topo = lab8()
    busy = [g for g in range(topo.num_gpus) if topo.gpu_node[g] not in (1, 2)]
    running = [RunningJob("r", "x", tuple(busy[:8]), 0.0, 0.0, 600.0), RunningJob("s", "x", tuple(busy[8:]), 0.0, 0.0, 9000.0)]
    s = make_state(topo, [job("big", 16)], running=running, now=0.0)
    plan = make_policy("fifo+consolidate+backfill").decide(s)
    assert plan.starts == () and [h.job_id for h in plan.holds] == ["big"]
    assert plan.holds[0].expected_start == 600.0 and accepted(topo, plan.holds[0].gpus)
    flat = replace(topo, blocks=None)  # without the block rule the same plan crosses b1 and b2
    (start,) = make_policy("fifo+consolidate+backfill").decide(replace(s, topology=flat)).starts
    assert not accepted(topo, start.gpus)


@pytest.mark.parametrize("limit, started", [(3600.0, []), (500.0, ["small"])])
def test_the_slurm_presets_reservations_keep_to_the_blocks(limit, started):
    """slurmctld's will-run test evaluates blocks as its start test does, so the backfill a
    replay of Slurm models reserves a blocked job's nodes inside one block. node1 (b1) and
    node3 (b2) free at 100 s, their block partners at 5,000 s; node5 (b3) is free now and
    node6 at 1,000 s. A 16-GPU job's reservation is b3 from 1,000 s, not node1 + node3 from
    100 s (which slurmctld refuses), so a job behind it may start on node5 now only if it
    ends before then."""
    topo = lab8()
    ends = {0: 100.0, 1: 5000.0, 2: 100.0, 3: 5000.0, 5: 1000.0, 6: 5000.0, 7: 5000.0}
    running = [RunningJob(f"r{n}", "x", tuple(range(8 * n, 8 * n + 8)), 0.0, 0.0, end) for n, end in ends.items()]
    s = make_state(topo, [job("big", 16), job("small", 8, submit=1.0, limit=limit)], running=running, now=0.0)
    plan = make_policy("slurm").decide(s)
    assert [st.job_id for st in plan.starts] == started
    flat = replace(s, topology=replace(topo, blocks=None))  # without the rule: reserved on node1 + node3
    assert [st.job_id for st in make_policy("slurm").decide(flat).starts] == ["small"]


def test_nodes_in_no_block_take_no_job():
    topo = lab8()
    inside = replace(topo, blocks=parse_topology_conf("BlockName=b1 Nodes=node[1-2]\n").blocks)
    s = make_state(inside, [job("a", 8), job("b", 8), job("c", 8)])
    assert Fit.of(s).usable(s.pending[0], s.free)[16:].sum() == 0
    plan = make_policy("fifo+consolidate").decide(s)
    assert sorted(st.job_id for st in plan.starts) == ["a", "b"]
    assert {int(topo.gpu_node[g]) for st in plan.starts for g in st.gpus} == {0, 1}


def test_a_node_list_across_blocks_is_never_placed():
    topo = lab8()
    s = make_state(topo, [job("w", 16, nodelist=("node2", "node3")), job("v", 16, nodelist=("node3", "node4"))])
    fit = Fit.of(s)
    assert not fit.usable(s.pending[0], s.free).any()
    (start,) = make_policy("fifo+consolidate").decide(s).starts
    assert start.job_id == "v" and Consolidate().place(s.pending[1], fit.usable(s.pending[1], s.free), s) == start.gpus


def test_a_partition_without_block_nodes_is_planned_as_without_blocks():
    """slurmctld evaluates blocks only for a job whose candidate nodes include some
    (`topology_p_eval_nodes`): a partition of the nodes in no block schedules as usual."""
    topo = lab8("topology-block.yaml", "26.05")  # node7, node8 in no block
    outside = np.array([False] * 6 + [True] * 2)
    cap = replace(capacity(topo), partition_nodes={"cpu": outside, "main": np.ones(8, bool)})
    s = make_state(topo, [job("c", 16, partition="cpu"), job("m", 1, partition="main")], nodes=cap)
    fit = Fit.of(s)
    assert fit.usable(s.pending[0], s.free).sum() == 16  # node7 and node8 whole
    assert not fit.usable(s.pending[1], s.free)[48:].any()  # main holds block nodes: only those
    plan = make_policy("fifo+consolidate").decide(s)
    assert sorted(st.job_id for st in plan.starts) == ["c", "m"]


def test_a_wide_node_in_no_block_does_not_shrink_a_job_s_region():
    """node5 (8 GPUs) is in no block; node1-4 (4 GPUs) are blocks of one (BlockSizes=1,2,4).
    An 8-GPU job takes two block nodes, so its region must be sized for two, not for the one
    node5 could hold alone (found by review: it was, and the job was never planned)."""
    gres = "AutoDetect=off\nNodeName=node[1-4] Name=gpu File=/dev/nvidia[0-3]\nNodeName=node5 Name=gpu File=/dev/nvidia[0-7]\n"
    conf = "".join(f"BlockName=b{k} Nodes=node{k}\n" for k in range(1, 5)) + "BlockSizes=1,2,4\n"
    topo = topology_from_slurm(gres, parse_topology_conf(conf))
    s = make_state(topo, [job("j", 8)])
    usable = Fit.of(s).usable(s.pending[0], s.free)
    assert topo.per_node(usable).tolist() == [4, 4, 0, 0, 0]  # the best fitting pair of blocks
    (start,) = make_policy("fifo+consolidate+backfill").decide(s).starts
    assert accepted(topo, start.gpus)


def test_a_job_whose_gpu_type_is_only_outside_blocks_is_planned_there():
    """slurmctld drops the nodes a job cannot use (GPU type, features) before it asks whether
    blocks apply (`job_test.c`): a100 only on node7-8, in no block, so none do."""
    topo = lab8("topology-block.yaml", "26.05")
    cap = replace(capacity(topo, gpu_type=["gb200"] * 6 + ["a100"] * 2), partition_nodes={"main": np.ones(8, bool)})
    s = make_state(topo, [job("a", 8, partition="main", gpu_type="a100"), job("g", 8, partition="main", gpu_type="gb200")],
                   nodes=cap)
    fit = Fit.of(s)
    assert fit.usable(s.pending[0], s.free).sum() == 16 and not fit.usable(s.pending[1], s.free)[48:].any()
    assert sorted(st.job_id for st in make_policy("fifo+consolidate").decide(s).starts) == ["a", "g"]


def _hold_by_walking(job, state, placer):
    """`expected_hold` by its definition: release running jobs in order until the job places."""
    fit = Fit.of(state)
    future = state.free.copy()
    for run in state.running_by_end:
        future[list(fit.release(run))] = True
        usable = fit.usable(job, future)
        gpus = placer.place(job, usable, state) if usable.sum() >= job.num_gpus else None
        if gpus is not None:
            return tuple(gpus), run.expected_end(state.now)
    return None


def chunked_state(topo, seed):
    """`random_state` with its busy GPUs run by jobs of 1 to 8 GPUs on one node each."""
    s = random_state(topo, seed)
    rng = np.random.default_rng(seed)
    busy = sorted(g for r in s.running for g in r.gpus)
    running, i = [], 0
    while i < len(busy):
        k = int(rng.integers(1, 9))
        node = [g for g in busy[i:i + k] if topo.gpu_node[g] == topo.gpu_node[busy[i]]]
        running.append(RunningJob(f"c{i}", "x", tuple(node), 0.0, 0.0, float(rng.integers(100, 5000))))
        i += len(node)
    return make_state(topo, s.pending, running=running)


PLACERS = {"consolidate": Consolidate, "first-fit": FirstFit, "load-balance": LoadBalance,
           "slurm-select": SlurmSelectPlacer, "packed": PackedPlacer, "random": lambda: RandomPlacer(seed=3)}


@pytest.mark.parametrize("placer", PLACERS)
def test_a_hold_under_blocks_is_where_walking_the_releases_finds_it(placer):
    """Under blocks `expected_hold` bisects the releases (every job asks for its block) to
    where the job's usable GPUs first suffice, then walks on with the placer: the same hold
    as walking them all, for every placer (a packed placement comes and goes as the best
    block moves; the random placer draws at every call), with jobs of a fixed node count."""
    topo = lab8()
    compared = 0
    for seed in range(20):
        for s in (random_state(topo, seed), chunked_state(topo, seed)):
            for gpus, nodes in ((2, None), (4, None), (12, None), (16, None), (16, 2), (24, 3), (40, None)):
                j = job(f"x{gpus}", gpus, nodes=nodes)
                hold = expected_hold(j, s.free, s, PLACERS[placer]())
                walked = _hold_by_walking(j, s, PLACERS[placer]())
                assert (None if hold is None else (hold.gpus, hold.expected_start)) == walked, (seed, gpus, nodes)
                compared += hold is not None
    assert compared > 100


def test_whether_a_job_fits_only_grows_as_gpus_free_up():
    """`Fit.usable` under blocks: once a job's usable GPUs suffice, releasing more keeps
    them sufficing (what lets holds bisect), over random states and releases."""
    topo = lab8()
    checked = 0
    for seed in range(20):
        s = chunked_state(topo, seed)
        fit = Fit.of(s)
        for gpus, nodes in ((3, None), (8, None), (12, None), (16, 2), (20, None), (36, None)):
            j = job("x", gpus, nodes=nodes)
            future, fitted = s.free.copy(), False
            for run in s.running_by_end:
                future[list(run.gpus)] = True
                fits = int(fit.usable(j, future).sum()) >= gpus
                assert fits or not fitted, (seed, gpus, nodes)
                fitted, checked = fits, checked + 1
    assert checked > 1000


def test_any_gpus_of_a_jobs_usable_mask_are_accepted():
    """`Fit.usable`'s promise under blocks: whatever GPUs of its mask a placer takes (at
    random here), slurmctld accepts their nodes, including where a larger block is used
    with each node's room capped; over random states, job sizes and three block files."""
    rng = np.random.default_rng(3)
    gres = "AutoDetect=off\nNodeName=n[1-20] Name=gpu File=/dev/nvidia[0-3]\n"
    default_levels = topology_from_slurm(gres, parse_topology_conf("".join(
        f"BlockName=b{k} Nodes=n{k}\n" for k in range(1, 19))))  # 18 blocks of one node, n19-20 in none
    checked = 0
    for topo in (lab8(), lab8("topology-block.yaml", "26.05"), default_levels):
        for seed in range(15):
            s = random_state(topo, seed)
            fit = Fit.of(s)
            for gpus in (1, 3, 8, 12, 20, 36, 50):
                usable = np.flatnonzero(fit.usable(job("x", gpus), s.free))
                if len(usable) < gpus:
                    continue
                for _ in range(5):
                    taken = rng.choice(usable, size=gpus, replace=False)
                    assert accepted(topo, taken), (seed, gpus, sorted(set(topo.gpu_node[taken].tolist())))
                    checked += 1
    assert checked > 300


def test_a_job_that_fits_a_free_node_is_not_split_for_a_tighter_block():
    """node1 is free (b1 holds 9 GPUs with node2's one), node3 and node4 have 4 each (b2
    holds exactly 8): an 8-GPU job goes on node1, not split over b2 because b2 fits its
    count more tightly (found by review: it was, and `pack=1` held it instead)."""
    topo = lab8()
    running = [RunningJob("a", "x", tuple(range(9, 16)), 0.0, 0.0, 5000.0),
               RunningJob("b", "x", (20, 21, 22, 23, 28, 29, 30, 31), 0.0, 0.0, 900.0),
               RunningJob("c", "x", tuple(range(32, 64)), 0.0, 0.0, 5000.0)]
    s = make_state(topo, [job("big", 8)], running=running, now=0.0)
    for name in ("fifo+consolidate", "fifo:pack=1", "sjf+consolidate:pack=1"):
        (start,) = make_policy(name).decide(s).starts
        assert set(topo.gpu_node[list(start.gpus)].tolist()) == {0}, name


@pytest.mark.parametrize("placer", ["consolidate", "packed"])
def test_past_the_walk_a_hold_is_bisected_and_still_keeps_to_the_blocks(placer, monkeypatch):
    """Past `BLOCK_WALK` releases a hold is bisected: where placing stays possible once it
    is (Consolidate) the same hold as the walk; for the packing rule a hold Slurm accepts
    and the rule packs, never earlier than the walk's."""
    monkeypatch.setattr(policy_module, "BLOCK_WALK", 0)
    topo = lab8()
    compared = 0
    for seed in range(20):
        s = chunked_state(topo, seed)
        for gpus in (4, 12, 16, 40):
            j = job(f"x{gpus}", gpus)
            hold = expected_hold(j, s.free, s, PLACERS[placer]())
            walked = _hold_by_walking(j, s, PLACERS[placer]())
            assert (hold is None) == (walked is None), (seed, gpus)
            if hold is None:
                continue
            assert accepted(topo, hold.gpus) and hold.expected_start >= walked[1]
            if placer == "consolidate":
                assert (hold.gpus, hold.expected_start) == walked
            compared += 1
    assert compared > 30
