"""What Slurm checks besides GPUs, in the simulator: CPUs, memory, --exclusive, GPU type,
-w/-x and features. The engine keeps each node's free CPUs and memory, shows them to the
policy as ``ClusterState.nodes`` and refuses a start that would not fit them."""

from __future__ import annotations

import pickle
import re
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attentived.agents.plan import Plan, Start
from attentived.agents.registry import make_policy
from attentived.agents.state import ClusterState
from attentived.simulator.engine import UNKNOWN_CAPACITY, PolicyError, SimJob, Simulation, UnstartableJob, prepare_jobs
from attentived.simulator.replay import replay
from attentived.simulator.trace import TraceError, TraceJob, load_trace
from attentived.topology import load_cluster_file, parse_cluster_file, uniform

FIXTURES = Path(__file__).parent / "fixtures"


def cluster(cpus: int = 16, mem: int = 64000, extra: str = ""):
    """Two 4-GPU nodes, gpu1 and gpu2 (GPUs 0-3 and 4-7)."""
    return parse_cluster_file(f'[[nodes]]\nnames = "gpu[1-2]"\ngpus = 4\ncpus = {cpus}\nmem_mb = {mem}\n{extra}')


def job(job_id: str, gpus: int = 1, submit: float = 0.0, duration: float = 100.0, **requests) -> SimJob:
    trace_job = TraceJob(job_id, submit, "alice", gpus, duration, None, 0, **requests)
    return SimJob(trace_job, duration, "imagenet")


def stepped(jobs, topo) -> tuple[Simulation, ClusterState]:
    sim = Simulation(jobs, topo)
    sim.reset()
    state = sim.next_decision()
    assert state is not None
    return sim, state


def start(sim: Simulation, *starts: tuple[str, tuple[int, ...]]) -> None:
    sim.apply(Plan(order=[j for j, _ in starts], starts=tuple(Start(j, g) for j, g in starts)))


# ---- the engine's accounting, driven by hand-made plans ---------------------------------


def test_cpus_and_memory_are_taken_and_given_back():
    sim, state = stepped([job("a", 2, cpus=10, mem_per_node=20000, duration=50), job("b", cpus=4)], cluster())
    assert state.nodes is not None
    assert state.nodes.cpus.tolist() == [16, 16] and state.nodes.mem.tolist() == [64000, 64000]
    assert state.nodes.idle.tolist() == [True, True]
    assert state.nodes.gpu_type == ("", "") and state.nodes.features == (frozenset(), frozenset())
    start(sim, ("a", (0, 1)), ("b", (2,)))
    after = sim.snapshot().nodes
    assert after is not None
    assert after.cpus.tolist() == [16 - 10 - 4, 16] and after.mem.tolist() == [64000 - 20000, 64000]
    assert after.idle.tolist() == [False, True]
    assert not after.cpus.flags.writeable and not after.idle.flags.writeable
    assert state.nodes.cpus.tolist() == [16, 16]  # an earlier snapshot does not change
    running = {r.job_id: r for r in sim.snapshot().running}
    assert (running["a"].cpus, running["a"].mem, running["a"].exclusive) == (10, 20000, False)
    assert (running["b"].cpus, running["b"].mem) == (4, 0)
    assert sim.next_decision() is None  # a ends at 50, b at 100: nothing left to decide
    assert sim._res is not None and sim._res.cpus.tolist() == [16, 16] and sim._res.mem.tolist() == [64000, 64000]
    assert sim._res.jobs.tolist() == [0, 0]


def test_a_start_needing_more_cpus_than_a_node_has_left_is_refused():
    sim, _ = stepped([job("a", cpus=12), job("b", cpus=8)], cluster())
    start(sim, ("a", (0,)))
    with pytest.raises(PolicyError, match=r"policy external: start of job b: needs 8 CPUs on node gpu1, 4 are free"):
        start(sim, ("b", (1,)))
    start(sim, ("b", (4,)))  # the other node has them
    assert sim.snapshot().nodes.cpus.tolist() == [4, 8]


def test_memory_per_node_and_per_cpu_are_checked_on_every_node():
    sim, _ = stepped(
        [job("big", cpus=2, mem_per_node=60000), job("small", cpus=4, mem_per_cpu=2000), job("x", cpus=1, mem_per_cpu=5000)],
        cluster(),
    )
    start(sim, ("big", (0,)))
    with pytest.raises(PolicyError, match=r"job small: needs 8000 MB on node gpu1, 4000 MB are free"):
        start(sim, ("small", (1,)))
    start(sim, ("small", (4,)), ("x", (5,)))
    assert sim.snapshot().nodes.mem.tolist() == [4000, 64000 - 8000 - 5000]


def test_memory_per_gpu_is_checked_per_node_by_the_gpus_there():
    # 20 GB per GPU: 3 GPUs on gpu1 need 60 GB there, 1 on gpu2 20 GB; a policy sees it too
    sim, state = stepped([job("j", 4, mem_per_gpu=20000), job("k", 2, mem_per_gpu=20000)], cluster())
    assert {p.job_id: p.mem_per_gpu for p in state.pending} == {"j": 20000, "k": 20000}
    start(sim, ("j", (0, 1, 2, 4)))
    assert sim.snapshot().nodes.mem.tolist() == [64000 - 60000, 64000 - 20000]
    (running,) = sim.snapshot().running
    assert running.mem == 80000
    with pytest.raises(PolicyError, match=r"job k: needs 20000 MB on node gpu1, 4000 MB are free"):
        start(sim, ("k", (3, 5)))
    start(sim, ("k", (5, 6)))


def test_a_job_s_cpus_spread_over_its_nodes_in_proportion_to_its_gpus():
    # 3 GPUs on gpu1 and 1 on gpu2: ceil(8 * 3/4) = 6 and ceil(8 * 1/4) = 2 CPUs, memory per CPU.
    sim, _ = stepped([job("j", 4, cpus=8, mem_per_cpu=1000)], cluster())
    start(sim, ("j", (0, 1, 2, 4)))
    nodes = sim.snapshot().nodes
    assert nodes is not None
    assert nodes.cpus.tolist() == [16 - 6, 16 - 2] and nodes.mem.tolist() == [64000 - 6000, 64000 - 2000]
    (running,) = sim.snapshot().running
    assert (running.cpus, running.mem) == (8, 8000)


def test_an_exclusive_job_needs_idle_nodes_and_then_holds_them_whole():
    sim, _ = stepped([job("a"), job("x", exclusive=True, cpus=2, duration=30), job("b"), job("c")], cluster())
    start(sim, ("a", (0,)))
    with pytest.raises(PolicyError, match=r"job x: an exclusive job needs node gpu1 idle, 1 job\(s\) run there"):
        start(sim, ("x", (1,)))
    start(sim, ("x", (4,)))
    state = sim.snapshot()
    assert state.nodes is not None
    assert state.free.tolist() == [False, True, True, True] + [False] * 4  # gpu2 is held whole
    assert state.nodes.cpus.tolist() == [16, 0] and state.nodes.mem.tolist() == [64000, 0]
    assert state.nodes.idle.tolist() == [False, False]
    (held,) = [r for r in state.running if r.job_id == "x"]
    assert (held.cpus, held.mem, held.exclusive) == (16, 64000, True)  # the node's, whole
    with pytest.raises(PolicyError, match=r"job b: GPUs \(5,\) are not all free"):
        start(sim, ("b", (5,)))
    # x ends at 30: the whole node comes back
    state = sim.next_decision()
    assert state is not None and state.now == 30
    assert state.free.tolist() == [False] + [True] * 7
    assert state.nodes is not None and state.nodes.cpus.tolist() == [16, 16] and state.nodes.idle.tolist() == [False, True]


def test_within_one_plan_a_node_taken_whole_cannot_take_another_job():
    sim, _ = stepped([job("x", exclusive=True), job("b"), job("y", exclusive=True)], cluster())
    with pytest.raises(PolicyError, match=r"job b: node gpu1 is held whole by an exclusive job"):
        start(sim, ("x", (0,)), ("b", (1,)))
    with pytest.raises(PolicyError, match=r"job y: an exclusive job needs node gpu1 idle"):
        start(sim, ("b", (0,)), ("y", (1,)))
    # Neither plan changed anything: every start is checked before any is applied.
    state = sim.snapshot()
    assert state.free.all() and not state.running
    assert state.nodes is not None and state.nodes.cpus.tolist() == [16, 16] and state.nodes.idle.all()
    start(sim, ("x", (0,)), ("b", (4,)))
    state = sim.snapshot()
    assert state.nodes is not None and state.nodes.idle.tolist() == [False, False]
    assert state.free.tolist() == [False] * 5 + [True] * 3


def test_gpu_type_features_nodelist_and_exclude_are_checked():
    topo = parse_cluster_file(
        '[[nodes]]\nnames = "gpu1"\ngpus = 4\ngpu_type = "a100"\nfeatures = ["ib"]\n'
        '[[nodes]]\nnames = "gpu2"\ngpus = 4\ngpu_type = "h100"\nfeatures = ["ib", "nvme"]\n'
    )
    jobs = [
        job("typed", gpu_type="h100"),
        job("featured", features=("nvme",)),
        job("pinned", 2, nodelist=("gpu1", "gpu2")),
        job("avoids", exclude=("gpu2",)),
    ]
    sim, state = stepped(jobs, topo)
    assert state.nodes is not None
    assert state.nodes.gpu_type == ("a100", "h100") and state.nodes.features == (frozenset({"ib"}), frozenset({"ib", "nvme"}))
    assert state.nodes.cpus.tolist() == [UNKNOWN_CAPACITY] * 2  # undeclared: never the limit
    bad = [
        (("typed", (0,)), r"job typed: node gpu1 has GPU type 'a100', the job asks for 'h100'"),
        (("featured", (1,)), r"job featured: node gpu1 lacks feature\(s\) nvme"),
        (("pinned", (4, 5)), r"job pinned: its nodelist \(-w\) needs node gpu1 among its nodes \['gpu2'\]"),
        (("avoids", (4,)), r"job avoids: node gpu2 is excluded \(-x\)"),
    ]
    for plan_start, message in bad:
        with pytest.raises(PolicyError, match=message):
            start(sim, plan_start)
    start(sim, ("typed", (4,)), ("featured", (5,)), ("pinned", (0, 6)), ("avoids", (1,)))
    assert len(sim.snapshot().running) == 4


def test_a_job_that_can_never_start_is_refused_up_front():
    topo = cluster(extra='gpu_type = "a100"\nfeatures = ["ib"]\n')
    for request, words in [
        ({"nodelist": ("gpu9",)}, "its nodelist (-w) names gpu9, which the cluster does not have"),
        ({"gpu_type": "h100"}, "it needs 1 GPU(s), the nodes with GPU type h100 it may use have 0"),
        ({"features": ("nvme",)}, "it needs 1 GPU(s), the nodes with features nvme it may use have 0"),
        ({"exclude": ("gpu1", "gpu2")}, "it needs 1 GPU(s), the nodes it may use have 0"),
        ({"cpus": 17}, "no node has 1 GPU(s), 17 CPUs and 0 MB"),
        ({"cpus": 1, "mem_per_node": 64001}, "no node has 1 GPU(s), 1 CPUs and 64001 MB"),
    ]:
        with pytest.raises(ValueError, match=re.escape(f"job j can never start on this cluster: {words}")):
            Simulation([job("j", **request)], topo)
    with pytest.raises(ValueError, match="it needs 33 CPUs, the nodes it may use have 32"):
        Simulation([job("j", 8, cpus=33)], topo)
    # 40 GB per GPU on two 64 GB nodes: one GPU each, so two GPUs fit (split) and three never
    Simulation([job("j", 2, mem_per_gpu=40000)], topo)
    with pytest.raises(ValueError, match=re.escape("it needs 3 GPU(s) with 40000 MB each, the nodes it may use have memory for 2")):
        Simulation([job("j", 3, mem_per_gpu=40000)], topo)
    with pytest.raises(ValueError, match=re.escape("it needs 5 GPU(s), the nodes of its nodelist (-w) have 4")):
        Simulation([job("j", 5, nodelist=("gpu1",))], topo)
    with pytest.raises(ValueError, match=re.escape("its nodelist (-w) names 2 nodes but it has only 1 GPUs")):
        Simulation([job("j", 1, nodelist=("gpu1", "gpu2"))], topo)
    # a node count the cluster cannot hold, whether or not anything else is tracked
    for quick in (topo, uniform(2, 8)):
        with pytest.raises(ValueError, match=re.escape("it asks for 4 node(s) with 2 GPU(s) each, the cluster has 2")):
            Simulation([job("j", 8, num_nodes=4)], quick)
    with pytest.raises(ValueError, match=re.escape("it asks for 1 node(s) with 16 GPU(s) each, the cluster has 0")):
        Simulation([job("j", 16, num_nodes=1)], uniform(2, 8))
    for request in ({"exclude": ("gpu1",)}, {"nodelist": ("gpu1",)}):  # one of the two nodes it may use
        with pytest.raises(ValueError, match=re.escape("it asks for 2 node(s) with 1 GPU(s) each, the nodes it may use have 1")):
            Simulation([job("j", 2, num_nodes=2, **request)], topo)


def test_without_requests_or_declared_resources_nothing_is_tracked():
    sim, state = stepped([job("a"), job("b", 2)], uniform(2, 4))
    assert state.nodes is None and sim._res is None
    start(sim, ("a", (0,)))
    assert sim.snapshot().running[0].cpus == 0 and sim.snapshot().nodes is None


def test_requests_the_cluster_cannot_model_are_dropped_or_unlimited():
    # A quick cluster names no GPU type or feature and declares no CPUs: the type and the
    # features are dropped, the CPUs asked are tracked against unknown (unlimited) nodes.
    sim, state = stepped([job("a", cpus=500, gpu_type="v100", features=("ib",))], uniform(2, 4))
    (pending,) = state.pending
    assert (pending.cpus, pending.gpu_type, pending.features) == (500, "", ())
    assert state.nodes is not None and state.nodes.cpus.tolist() == [UNKNOWN_CAPACITY] * 2
    start(sim, ("a", (0,)))
    assert sim.snapshot().nodes.cpus.tolist() == [UNKNOWN_CAPACITY - 500, UNKNOWN_CAPACITY]


def test_declared_cpus_alone_turn_tracking_on():
    _, state = stepped([job("a")], cluster())
    assert state.nodes is not None and state.nodes.cpus.tolist() == [16, 16]


def test_replay_names_the_trace_line_of_a_job_that_can_never_start(tmp_path: Path):
    path = tmp_path / "jobs.csv"
    path.write_text("job_id,submit_time,user,num_gpus,duration,cpus\nok,0,u,1,10,4\nbig,5,u,1,10,17\n")
    with pytest.raises(TraceError) as caught:
        replay(load_trace(path), cluster(), [make_policy("fifo")])
    assert (caught.value.path, caught.value.line) == (str(path), 3)
    assert "job big can never start on this cluster: no node has 1 GPU(s), 17 CPUs and 0 MB" in str(caught.value)
    error = UnstartableJob("big", "why")
    assert pickle.loads(pickle.dumps(error)).args == error.args


# ---- a replay from files -----------------------------------------------------------------


class Recording:
    """A policy that records what it saw and lets another decide."""

    def __init__(self, name: str) -> None:
        self.inner = make_policy(name)
        self.name = self.inner.name
        self.seen: list[ClusterState] = []

    @property
    def needs_oracle(self) -> bool:
        return self.inner.needs_oracle

    def decide(self, state: ClusterState):
        self.seen.append(state)
        return self.inner.decide(state)


def test_cluster_file_with_cpus_and_trace_with_requests_replay():
    """The trace is arranged so that any GPU-only placer also fits the CPUs: e1 takes gpu1
    whole, s1 and s2 fill gpu2's GPUs and CPUs, s3 waits for s1's GPU and CPUs."""
    topo = load_cluster_file(FIXTURES / "cpu_cluster.toml")
    assert [(n.cpus, n.mem_mb, n.gpu_type, n.features) for n in topo.nodes] == [(16, 64000, "a100", ("ib",))] * 2
    trace = load_trace(FIXTURES / "generic_resources.csv")
    assert [(j.job_id, j.cpus, j.mem_per_node, j.exclusive) for j in trace.jobs] == [
        ("e1", 4, 0, True), ("s1", 8, 16384, False), ("s2", 8, 0, False), ("s3", 1, 0, False),
    ]  # fmt: skip
    policy = Recording("fifo")
    result = Simulation(prepare_jobs(trace.jobs, 0), topo, policy).run()
    spans = {r.job_id: (r.start_time, r.end_time, r.gpus) for r in result.records}
    assert spans == {
        "e1": (0, 100, (0, 1)),
        "s1": (10, 60, (4, 5)),
        "s2": (20, 70, (6, 7)),
        "s3": (60, 70, (4,)),
    }
    at_60 = next(s for s in policy.seen if s.now == 60)
    assert at_60.nodes is not None
    assert at_60.nodes.cpus.tolist() == [0, 8] and at_60.nodes.mem.tolist() == [0, 64000]
    assert at_60.free.tolist() == [False] * 4 + [True, True, False, False]


# ---- once the placers honour the requests (attentived.agents.fit) -------------------------

HEURISTICS = ["fifo", "sjf+consolidate", "slurm", "tiresias", "fifo+random", "fair-share+consolidate"]


def _check_nodes(records, jobs: dict[str, TraceJob], topo, cpus_per_node: int) -> None:
    """At no instant does a node run more CPUs than it has, or an exclusive job and another."""
    events = sorted({t for r in records for t in (r.start_time, r.end_time)})
    for t in events:
        on: dict[int, list[str]] = defaultdict(list)
        used = np.zeros(len(topo.nodes), dtype=np.int64)
        for r in records:
            if r.start_time <= t < r.end_time:
                nodes, per = np.unique(topo.gpu_node[list(r.gpus)], return_counts=True)
                for n, g in zip(nodes.tolist(), per.tolist()):
                    on[n].append(r.job_id)
                    used[n] += -(-jobs[r.job_id].cpus * g // r.num_gpus)
        assert (used <= cpus_per_node).all(), (t, used)
        for n, ids in on.items():
            if any(jobs[i].exclusive for i in ids):
                assert len(ids) == 1, (t, topo.nodes[n].name, ids)


@pytest.mark.parametrize("name", HEURISTICS)
def test_a_job_needing_more_cpus_than_are_left_waits(name):
    pytest.importorskip("attentived.agents.fit")
    # One 4-GPU node with 16 CPUs: a holds 12 of them for 100 s; b (8 CPUs) must wait for
    # it although three GPUs are free.
    topo = parse_cluster_file('[[nodes]]\nnames = "gpu1"\ngpus = 4\ncpus = 16\n')
    jobs = [job("a", cpus=12, duration=100), job("b", submit=1, cpus=8, duration=10)]
    records = {r.job_id: r for r in Simulation(jobs, topo, make_policy(name)).run().records}
    assert records["a"].start_time == 0
    assert records["b"].start_time == pytest.approx(100)
    _check_nodes(records.values(), {j.job.job_id: j.job for j in jobs}, topo, 16)


@pytest.mark.parametrize("name", HEURISTICS)
def test_exclusive_jobs_never_share_a_node(name):
    pytest.importorskip("attentived.agents.fit")
    topo = cluster(cpus=32)
    rng = np.random.default_rng(7)
    trace = [
        TraceJob(
            f"j{i}", float(i * 5), f"u{i % 3}", int(rng.choice([1, 2, 4])), float(rng.integers(20, 200)), None, 0,
            cpus=int(rng.integers(0, 12)), exclusive=bool(i % 4 == 0),
        )
        for i in range(40)
    ]  # fmt: skip
    jobs = prepare_jobs(trace, 0)
    records = Simulation(jobs, topo, make_policy(name)).run().records
    assert len(records) == 40
    _check_nodes(records, {j.job_id: j for j in trace}, topo, 32)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    nodes=st.integers(1, 3),
    gpn=st.sampled_from([4, 8]),
    node_cpus=st.integers(4, 32),
    raw=st.lists(
        st.tuples(st.floats(0, 300), st.floats(1, 200), st.integers(1, 12), st.floats(0, 1), st.booleans()),
        min_size=1,
        max_size=25,
    ),
    name=st.sampled_from(HEURISTICS),
)
def test_any_request_mix_replays_within_the_nodes(nodes, gpn, node_cpus, raw, name):
    """The engine checks every start against the nodes (PolicyError otherwise); the records
    are checked again here, independently."""
    pytest.importorskip("attentived.agents.fit")
    topo = parse_cluster_file(f'[[nodes]]\nnames = "n[1-{nodes}]"\ngpus = {gpn}\ncpus = {node_cpus}\n')
    trace = [
        TraceJob(f"j{i}", submit, f"u{i % 3}", min(g, topo.num_gpus), duration, None, 0,
                 cpus=int(share * node_cpus), exclusive=exclusive)
        for i, (submit, duration, g, share, exclusive) in enumerate(sorted(raw))
    ]  # fmt: skip
    records = Simulation(prepare_jobs(trace, 0), topo, make_policy(name)).run().records
    assert sorted(r.job_id for r in records) == sorted(j.job_id for j in trace)
    _check_nodes(records, {j.job_id: j for j in trace}, topo, node_cpus)
