from __future__ import annotations

from collections import defaultdict

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attentived.agents.plan import Plan, Start
from attentived.agents.registry import ALL, make_policy
from attentived.simulator.engine import MainPasses, PolicyError, Relay, SimJob, Simulation, prepare_jobs
from attentived.simulator.metrics import summarize
from attentived.simulator.trace import TraceJob
from attentived.topology import uniform


def tj(job_id, submit, duration, gpus=1, user="alice", model=None):
    return TraceJob(job_id=job_id, submit_time=submit, user=user, num_gpus=gpus, duration=duration, model=model, line=0)


def three_jobs():
    """One GPU; A long then B and C queue behind it. Limits equal the true durations."""
    jobs = [tj("A", 0, 100), tj("B", 1, 50, user="bob"), tj("C", 2, 10)]
    return [SimJob(j, j.duration, "imagenet") for j in jobs]


def run(jobs, policy, topo=None):
    return Simulation(jobs, topo or uniform(1, 1), make_policy(policy)).run()


def test_fifo_and_sjf_differ_as_computed_by_hand():
    fifo = {r.job_id: (r.start_time, r.end_time) for r in run(three_jobs(), "fifo").records}
    sjf = {r.job_id: (r.start_time, r.end_time) for r in run(three_jobs(), "sjf").records}
    assert fifo == {"A": (0, 100), "B": (100, 150), "C": (150, 160)}
    assert sjf == {"A": (0, 100), "C": (100, 110), "B": (110, 160)}


def test_metrics_on_the_hand_computed_schedule():
    m = summarize(run(three_jobs(), "fifo").records, num_gpus=1)
    assert m["jobs"] == 3
    assert m["avg_jct"] == pytest.approx((100 + 149 + 158) / 3)
    assert m["avg_wait"] == pytest.approx((0 + 99 + 148) / 3)
    assert m["makespan"] == pytest.approx(160)
    assert m["utilization"] == pytest.approx(160 / 160)
    # users' mean waits: alice (0 + 148) / 2 = 74, bob 99
    assert m["jain_fairness"] == pytest.approx(173**2 / (2 * (74**2 + 99**2)))
    assert m["max_user_wait"] == pytest.approx(99)
    # slowdown (wait + run) / max(run, 10): A 100/100 = 1, B 99+50 / 50 = 2.98, C 148+10 / 10 = 15.8
    alice, bob = (1 + 15.8) / 2, 149 / 50
    assert m["jain_slowdown"] == pytest.approx((alice + bob) ** 2 / (2 * (alice**2 + bob**2)))
    assert m["comm_cost"] == pytest.approx(0.0)
    assert m["lower_bound_ratio"] == pytest.approx(((100 + 149 + 158) / 3) / (160 / 3))
    s = summarize(run(three_jobs(), "sjf").records, num_gpus=1)
    assert s["avg_jct"] == pytest.approx((100 + 108 + 159) / 3)


def test_spread_placement_costs_time_and_shows_as_comm_cost():
    # Two 2-GPU nodes on different switches. Two 1-GPU jobs arrive first; load-balance puts
    # one on each node, so the 2-GPU job must cross the spine. Consolidate packs them on
    # one node and the 2-GPU job runs at its ideal speed on the other.
    topo = uniform(2, 2, nodes_per_switch=1)
    jobs = [
        SimJob(tj("X", 0, 5000), 6000.0, "imagenet"),
        SimJob(tj("Y", 0, 5000), 6000.0, "imagenet"),
        SimJob(tj("J", 1, 1000, gpus=2), 2000.0, "bert"),
    ]
    spread = {r.job_id: r for r in run(jobs, "fifo+load-balance", topo).records}
    packed = {r.job_id: r for r in run(jobs, "fifo+consolidate", topo).records}
    assert topo.spread(spread["J"].gpus) == (2, 2, 2)
    assert spread["J"].runtime > 1000
    assert packed["J"].runtime == pytest.approx(1000)
    m = summarize(list(spread.values()), topo.num_gpus)
    assert m["comm_cost"] == pytest.approx((spread["J"].runtime - 1000) * 2)
    assert summarize(list(packed.values()), topo.num_gpus)["comm_cost"] == pytest.approx(0.0)


def test_same_seed_same_schedule_different_seed_different_limits():
    jobs = [tj(f"j{i}", i * 7.0, 50 + (i * 37) % 400, gpus=1 + i % 4, user=f"u{i % 3}") for i in range(60)]
    topo = uniform(2, 4)
    a = Simulation(prepare_jobs(jobs, 1), topo, make_policy("sjf")).run().records
    b = Simulation(prepare_jobs(jobs, 1), topo, make_policy("sjf")).run().records
    assert a == b
    assert prepare_jobs(jobs, 1) != prepare_jobs(jobs, 2)


def _check_schedule(records, jobs, topo):
    assert sorted(r.job_id for r in records) == sorted(j.job.job_id for j in jobs)  # each exactly once
    by_gpu = defaultdict(list)
    for r in records:
        assert r.start_time >= r.submit_time
        assert len(set(r.gpus)) == r.num_gpus
        for g in r.gpus:
            assert 0 <= g < topo.num_gpus
            by_gpu[g].append((r.start_time, r.end_time))
    for spans in by_gpu.values():  # no GPU serves two jobs at once
        spans.sort()
        for (_s1, e1), (s2, _e2) in zip(spans, spans[1:]):
            assert s2 >= e1 - 1e-9


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    nodes=st.integers(1, 5),
    gpn=st.sampled_from([1, 2, 4, 8]),
    raw=st.lists(
        st.tuples(st.floats(0, 500), st.floats(1, 300), st.integers(1, 40), st.integers(0, 3)),
        min_size=1,
        max_size=40,
    ),
    policy=st.sampled_from(list(ALL) + ["sjf+load-balance+backfill", "tiresias+random+backfill"]),
    seed=st.integers(0, 5),
)
def test_any_trace_on_any_cluster_completes_every_job_once_without_overallocation(nodes, gpn, raw, policy, seed):
    topo = uniform(nodes, gpn, nodes_per_switch=2)
    trace = [
        tj(f"j{i}", submit, dur, gpus=min(g, topo.num_gpus), user=f"u{u}")
        for i, (submit, dur, g, u) in enumerate(sorted(raw))
    ]
    jobs = prepare_jobs(trace, seed)
    result = Simulation(jobs, topo, make_policy(policy, seed)).run()
    _check_schedule(result.records, jobs, topo)


def test_the_release_order_the_simulator_keeps_is_the_one_a_state_would_sort():
    """The engine keeps running jobs by deadline as they start and end; at every decision
    that order is what `ClusterState.running_by_end` computes from scratch (jobs past their
    limit or without one first, by job id)."""
    import dataclasses

    raw = [tj(f"j{i:03d}", float(37 * i % 400), float(300 + 173 * i % 2000), gpus=1 + i % 8, user=f"u{i % 4}") for i in range(120)]
    jobs = prepare_jobs(raw, seed=3)
    jobs = [dataclasses.replace(j, time_limit=None) if i % 9 == 0 else j for i, j in enumerate(jobs)]  # some without a limit
    sim = Simulation(jobs, uniform(2, 8), make_policy("sjf+consolidate"))
    sim.reset()
    checked = 0
    while (state := sim.next_decision()) is not None:
        fresh = dataclasses.replace(state, release_order=None)
        assert state.running_by_end == fresh.running_by_end
        checked += bool(state.running)
        sim.apply(sim.policy.decide(state))
    assert checked > 20


def test_a_cadence_starts_jobs_at_the_schedulers_passes_only():
    topo = uniform(1, 2)
    jobs = [SimJob(tj("a", 0.3, 5.0, gpus=2), 10.0, "resnet50"), SimJob(tj("b", 0.4, 2.0, gpus=2), 10.0, "resnet50")]
    instant = {r.job_id: r.start_time for r in Simulation(jobs, topo, make_policy("fifo")).run().records}
    assert instant == {"a": 0.3, "b": 5.3}
    paced = {r.job_id: r.start_time for r in Simulation(jobs, topo, make_policy("fifo"), cadence=1.0).run().records}
    assert paced == {"a": 1.0, "b": 6.0}  # a at the first pass after it arrives, b at the first after a ends
    for bad in (-1.0, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="cadence"):
            Simulation(jobs, topo, make_policy("fifo"), cadence=bad)


def test_the_passes_fall_at_their_phase():
    topo = uniform(1, 2)
    jobs = [SimJob(tj("a", 0.3, 5.0, gpus=2), 10.0, "resnet50"), SimJob(tj("b", 0.4, 2.0, gpus=2), 10.0, "resnet50")]
    paced = Simulation(jobs, topo, make_policy("fifo"), cadence=1.0, phase=0.25).run().records
    assert [r.start_time for r in sorted(paced, key=lambda r: r.job_id)] == pytest.approx([1.25, 6.25])
    with pytest.raises(ValueError, match="phase"):
        Simulation(jobs, topo, make_policy("fifo"), cadence=1.0, phase=float("nan"))


def test_a_relay_starts_the_decided_jobs_at_its_next_pass_and_holds_their_gpus_meanwhile():
    """A daemon deciding every 0.5 s whose updates Slurm carries out at its passes (0.7,
    1.7, ...) 0.1 s after the decision: a decided at 0.5 starts at 0.7; b, decided at 0.5
    too but on GPUs a holds from the decision on, waits for a's end (5.7), is decided at the
    daemon's next cycle (6.0) and started at the pass after 6.1."""
    topo = uniform(1, 2)
    jobs = [SimJob(tj("a", 0.3, 5.0, gpus=2), 10.0, "resnet50"), SimJob(tj("b", 0.4, 2.0, gpus=1), 10.0, "resnet50")]
    relay = Relay(every=1.0, phase=0.7, delay=0.1)
    recs = {r.job_id: r for r in Simulation(jobs, topo, make_policy("fifo"), cadence=0.5, relay=relay).run().records}
    assert (recs["a"].start_time, recs["a"].end_time, recs["b"].start_time) == pytest.approx((0.7, 5.7, 6.7))
    assert [relay.start_of(t) for t in (0.55, 0.65, -0.4)] == pytest.approx([0.7, 1.7, -0.3])
    for bad in ({"every": 0.0}, {"every": 1.0, "delay": -0.1}, {"every": 1.0, "phase": float("inf")}):
        with pytest.raises(ValueError, match="relay"):
            Relay(**bad)


def test_main_passes_start_the_head_of_the_priority_order_between_the_passes():
    """Slurm alone's two loops: backfill at the passes (1.0, 2.0, ...), the main scheduler
    0.3 s after each. a (1 GPU) arrives at 0.05 and starts at the main pass at 0.3; b (2
    GPUs) is next in FIFO order and does not fit beside a, so the main pass stops there,
    and c (1 GPU, behind b, ending in time) is backfilled at the full pass at 1.0. Without
    main passes a starts at 1.0 too."""
    topo = uniform(1, 2)
    jobs = [SimJob(tj("a", 0.05, 10.0, gpus=1), 20.0, "resnet50"), SimJob(tj("b", 0.1, 2.0, gpus=2), 20.0, "resnet50"),
            SimJob(tj("c", 0.2, 1.0, gpus=1), 5.0, "resnet50")]
    fifo = make_policy("fifo+backfill")
    recs = {r.job_id: r for r in Simulation(jobs, topo, fifo, cadence=1.0, main=MainPasses(0.3, fifo)).run().records}
    assert (recs["a"].start_time, recs["c"].start_time) == pytest.approx((0.3, 1.0))
    assert recs["b"].start_time >= recs["a"].end_time
    alone = {r.job_id: r.start_time for r in Simulation(jobs, topo, make_policy("fifo+backfill"), cadence=1.0).run().records}
    assert (alone["a"], alone["c"]) == pytest.approx((1.0, 1.0))
    for cadence, offset in ((0.0, 0.3), (1.0, 0.0), (1.0, 1.0), (1.0, -0.2)):
        with pytest.raises(ValueError, match="main passes"):
            Simulation(jobs, topo, fifo, cadence=cadence, main=MainPasses(offset, fifo))


def test_a_priority_tick_is_acted_on_at_the_next_pass_without_waiting_for_an_event():
    """Slurm's backfill runs every pass, so a new priority order acts within a second of its
    calculation tick. One 8-GPU node: alice's h (2 GPUs) runs 0-30; carol's r (4 GPUs, to
    500) and r2 (2 GPUs) run on. alice's a (6 GPUs) and bob's b (2 GPUs, a long limit)
    arrive at 40 and 41 with equal priority (nobody's usage counted at the tick of 0), so
    a goes first and is held on h's GPUs and r's, and b may not take h's two. At the tick
    of 60 bob has the least usage: b goes first and starts on the two free GPUs at the pass
    of 60.5. Without looking again at the tick, nothing happens until r ends at 500."""
    topo = uniform(1, 8)
    jobs = [SimJob(tj("h", 0.0, 30.0, gpus=2), 60.0, "resnet50"),
            SimJob(tj("r", 0.0, 500.0, gpus=4, user="carol"), 600.0, "resnet50"),
            SimJob(tj("r2", 0.0, 5000.0, gpus=2, user="carol"), 6000.0, "resnet50"),
            SimJob(tj("a", 40.0, 100.0, gpus=6), 600.0, "resnet50"),
            SimJob(tj("b", 41.0, 100.0, gpus=2, user="bob"), 2000.0, "resnet50")]
    sim = Simulation(jobs, topo, make_policy("slurm:calc_period=60"), cadence=1.0, phase=0.5)
    recs = {r.job_id: r for r in sim.run().records}
    assert recs["b"].start_time == pytest.approx(60.5)
    assert recs["a"].start_time >= 500.0
    assert sim.now == max(r.end_time for r in recs.values())  # the wake-ups after the last end move no clock
    # without a cadence the engine decides at events only, as before
    at_events = {r.job_id: r for r in Simulation(jobs, topo, make_policy("slurm:calc_period=60")).run().records}
    assert at_events["b"].start_time >= 500.0


def test_an_overhead_lengthens_every_run():
    topo = uniform(1, 2)
    jobs = [SimJob(tj("a", 0.0, 5.0, gpus=2), 10.0, "resnet50"), SimJob(tj("b", 0.0, 2.0, gpus=2), 10.0, "resnet50")]
    recs = {r.job_id: r for r in Simulation(jobs, topo, make_policy("fifo"), overhead=0.25).run().records}
    assert (recs["a"].end_time, recs["b"].start_time, recs["b"].end_time) == pytest.approx((5.25, 5.25, 7.5))
    for bad in (-0.1, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="overhead"):
            Simulation(jobs, topo, make_policy("fifo"), overhead=bad)


def test_a_job_submitted_onto_an_empty_queue_is_decided_before_any_pass():
    """``at_submit``: a job that finds the queue empty is decided at once, alone.
    Long x and short y arrive together on 2 GPUs: SJF deciding at the pass starts y first,
    but x found the queue empty and was started at once; y, submitted behind it, waits
    for the pass after x ends; z arrives while y is pending: not at submit, after y."""
    topo = uniform(1, 2)
    jobs = [SimJob(tj("x", 0.3, 5.0, gpus=2), 10.0, "resnet50"), SimJob(tj("y", 0.3, 1.0, gpus=2), 2.0, "resnet50"),
            SimJob(tj("z", 0.4, 1.0, gpus=1), 2.0, "resnet50")]
    at_pass = {r.job_id: r.start_time for r in Simulation(jobs, topo, make_policy("sjf"), cadence=1.0).run().records}
    assert at_pass["y"] == 1.0 and at_pass["x"] > at_pass["y"]
    live = Simulation(jobs, topo, make_policy("sjf"), cadence=1.0, at_submit=make_policy("fifo")).run().records
    assert {r.job_id: r.start_time for r in live} == {"x": 0.3, "y": 6.0, "z": 7.0}
    assert {r.job_id: r.gpus for r in live}["x"] == (0, 1)


def test_the_decision_at_submit_sees_the_running_jobs_and_users():
    """A scheduler deciding at submission sees what it sees at a pass: the running jobs
    (their limits drive backfill and the agents' features) and users' finished jobs."""
    seen = []

    class Recording:
        name = "recording"

        def __init__(self) -> None:
            self.inner = make_policy("fifo")

        def decide(self, state):
            seen.append((state.now, [p.job_id for p in state.pending], [r.job_id for r in state.running],
                         sorted(state.users)))
            return self.inner.decide(state)

    topo = uniform(1, 4)
    jobs = [SimJob(tj("x", 0.3, 1.0, gpus=2), 10.0, "resnet50"), SimJob(tj("w", 2.0, 5.0, gpus=1), 10.0, "resnet50"),
            SimJob(tj("v", 2.5, 1.0, gpus=1), 10.0, "resnet50")]
    Simulation(jobs, topo, make_policy("sjf"), cadence=1.0, at_submit=Recording()).run()
    assert seen[0] == (0.3, ["x"], [], [])
    assert seen[1] == (2.0, ["w"], [], ["alice"])  # x has finished: its user's record is known
    assert seen[2] == (2.5, ["v"], ["w"], ["alice"])


def test_a_node_count_that_cannot_hold_the_gpus_is_refused():
    from dataclasses import replace

    for nodes in (0, 3):
        job = SimJob(replace(tj("a", 0.0, 5.0, gpus=4), num_nodes=nodes), 10.0, "resnet50")
        with pytest.raises(ValueError, match="cannot be split evenly"):
            Simulation([job], uniform(4, 8), make_policy("fifo"))


def test_a_plan_that_starts_a_job_twice_is_refused_before_anything_starts():
    jobs = [SimJob(TraceJob("A", 0.0, "u", 1, 100.0, None, 0), 900.0, "resnet50")]
    sim = Simulation(jobs, uniform(1, 2))
    sim.reset()
    sim.next_decision()
    with pytest.raises(PolicyError, match="job A: the plan starts it twice"):
        sim.apply(Plan(order=("A",), starts=(Start("A", (0,)), Start("A", (1,)))))
    assert sim.snapshot().free.all() and not sim.snapshot().running


def test_the_slowdown_index_is_not_raised_by_delaying_a_short_job():
    """A 2 s job that did not wait counts 1 (the floor), not 0.2: delaying it 8 s, which
    brings its user's mean to the other's, must not make the schedule look fairer."""
    from attentived.simulator.engine import JobRecord

    def rec(job_id, user, wait, run):
        return JobRecord(job_id, user, 1, "resnet50", 0.0, wait, wait + run, run, 3600.0, (0,))

    at_once = [rec("a", "alice", 0.0, 2.0), rec("b", "bob", 0.0, 100.0)]
    delayed = [rec("a", "alice", 8.0, 2.0), rec("b", "bob", 0.0, 100.0)]
    assert summarize(at_once, 1)["jain_slowdown"] == pytest.approx(1.0)
    assert summarize(delayed, 1)["jain_slowdown"] <= summarize(at_once, 1)["jain_slowdown"]
