"""The meta-heuristic choosers: feasible plans, determinism, the time budget, and search
quality on crafted queues."""

from __future__ import annotations

import statistics
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attentived.agents.annealing import Annealing
from attentived.agents.genetic import Genetic, _ox
from attentived.agents.metaheuristic import Portfolio
from attentived.agents.objective import LookAhead, SlowdownTable, Weights
from attentived.agents.placement import Consolidate
from attentived.agents.policy import Scheduler
from attentived.agents.state import PendingJob, RunningJob, UserStats
from attentived.topology import uniform

from .conftest import capacity, job, make_state

CHOOSERS = (Genetic, Annealing)
ALL_CHOOSERS = (Genetic, Annealing, Portfolio)
MODELS = (None, "bert", "cifar10", "yolov3", "imagenet", "ncf", "no-such-model")


def policy(cls, **kw):
    kw.setdefault("budget_ms", None)
    kw.setdefault("max_evaluations", 40)
    return Scheduler(cls(**kw), Consolidate())


def check_plan(state, plan):
    """Only pending jobs start, each on exactly its count of distinct GPUs that were free,
    no GPU twice, node shape honoured; the order ranks every pending job once."""
    pending = {j.job_id: j for j in state.pending}
    assert sorted(plan.order) == sorted(pending)
    taken: set[int] = set()
    for s in plan.starts:
        j = pending[s.job_id]
        assert len(s.gpus) == j.num_gpus == len(set(s.gpus))
        assert all(state.free[g] for g in s.gpus)
        assert not taken & set(s.gpus)
        taken |= set(s.gpus)
        if j.num_nodes is not None:
            per = np.bincount(state.topology.gpu_node[list(s.gpus)])
            assert sorted(per[per > 0]) == [j.num_gpus // j.num_nodes] * j.num_nodes
    assert len({s.job_id for s in plan.starts}) == len(plan.starts)


@st.composite
def states(draw):
    nodes = draw(st.integers(1, 6))
    gpn = draw(st.sampled_from([1, 2, 4, 8]))
    topo = uniform(nodes, gpn, nodes_per_switch=draw(st.sampled_from([1, 2, 4])))
    n = topo.num_gpus
    now = 10_000.0
    owner = draw(st.lists(st.integers(-2, 5), min_size=n, max_size=n))  # -2 down, -1 free, k running job k
    running, busy = [], []
    for k in range(6):
        gpus = tuple(g for g in range(n) if owner[g] == k)
        if gpus:
            limit = draw(st.one_of(st.none(), st.floats(60, 86_400)))
            running.append(RunningJob(f"r{k}", draw(st.sampled_from("abc")), gpus, now - 500, now - draw(st.floats(0, 5000)), limit))
    busy = [g for g in range(n) if owner[g] == -2]
    pending = []
    for i in range(draw(st.integers(0, 45))):
        g = draw(st.integers(1, min(n, 24)))
        nodes_req = None
        if draw(st.booleans()) and g <= n:
            k = draw(st.integers(1, nodes))
            if g % k == 0 and g // k <= gpn:
                nodes_req = k if draw(st.integers(0, 3)) == 0 else None
        pending.append(
            PendingJob(
                f"j{i}", draw(st.sampled_from("abcde")), g, draw(st.floats(0, now)),
                time_limit=draw(st.one_of(st.none(), st.floats(60, 7 * 86_400))), num_nodes=nodes_req,
                model=draw(st.sampled_from(MODELS)),
            )
        )
    users = {u: UserStats().add(1, draw(st.floats(0, 9000)), 100.0, draw(st.sampled_from([None, 200.0]))) for u in "ab"}
    return make_state(topo, pending, busy=busy, running=running, now=now, users=users)


@pytest.mark.parametrize("cls", ALL_CHOOSERS)
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(state=states(), seed=st.integers(0, 3))
def test_every_decision_is_feasible(cls, state, seed):
    p = policy(cls, seed=seed, max_evaluations=25, window=12)
    check_plan(state, p.decide(state))
    ranking = p.chooser.rank(state)
    assert sorted(np.asarray(ranking.order).tolist()) == list(range(len(state.pending)))
    assert ranking.startable is None or 0 <= ranking.startable <= len(state.pending)


@pytest.mark.parametrize("cls", ALL_CHOOSERS)
def test_feasible_through_a_whole_replay(cls):
    # The engine checks every start of every plan (PolicyError otherwise) and stalls loudly.
    from attentived.simulator.engine import Simulation, prepare_jobs
    from attentived.simulator.samples import sample_path
    from attentived.simulator.trace import load_trace

    trace = load_trace(sample_path("philly-sample"), max_jobs=120)
    res = Simulation(prepare_jobs(trace.jobs, 0), uniform(2, 8, nodes_per_switch=2), policy(cls, max_evaluations=30)).run()
    assert len(res.records) == 120


def crowded(lab, n=40):
    rng = np.random.default_rng(7)
    running = [RunningJob(f"r{k}", "x", tuple(range(8 * k, 8 * k + 6)), 0.0, 900.0 + 60 * k, 3600.0) for k in range(4)]
    pending = [
        PendingJob(f"j{i}", f"u{i % 5}", int(rng.choice([1, 2, 4, 8, 12])), float(rng.uniform(0, 1000)),
                   time_limit=float(rng.choice([900, 3600, 14_400])), model=str(rng.choice(["bert", "cifar10", "yolov3"])))
        for i in range(n)
    ]
    return make_state(lab, pending, running=running, now=1000.0)


@pytest.mark.parametrize("cls", ALL_CHOOSERS)
def test_deterministic_under_a_seed_and_an_evaluation_cap(cls, lab):
    s = crowded(lab)
    a, b = cls(seed=5, budget_ms=None, max_evaluations=150), cls(seed=5, budget_ms=None, max_evaluations=150)
    ra, rb = a.rank(s), b.rank(s)
    assert np.array_equal(ra.order, rb.order) and ra.startable == rb.startable
    assert a.last.evaluations == b.last.evaluations
    assert a.last.evaluations > 0 or cls is Portfolio
    again = a.rank(s)  # a decision depends on (seed, state), not on earlier calls
    assert np.array_equal(again.order, ra.order)
    plans = [Scheduler(cls(seed=5, budget_ms=None, max_evaluations=150), Consolidate()).decide(s) for _ in range(2)]
    assert plans[0].starts == plans[1].starts


@pytest.mark.parametrize("cls", ALL_CHOOSERS)
def test_replay_is_deterministic(cls):
    from attentived.simulator.engine import Simulation, prepare_jobs
    from attentived.simulator.samples import sample_path
    from attentived.simulator.trace import load_trace

    trace = load_trace(sample_path("philly-sample"), max_jobs=80)
    runs = [
        Simulation(prepare_jobs(trace.jobs, 1), uniform(2, 8), policy(cls, seed=3, max_evaluations=40)).run()
        for _ in range(2)
    ]
    assert [(r.job_id, r.start_time, r.gpus) for r in runs[0].records] == [(r.job_id, r.start_time, r.gpus) for r in runs[1].records]


@pytest.mark.parametrize("clock", ["wall", "cpu"])
@pytest.mark.parametrize("cls", CHOOSERS)
def test_time_budget_is_respected(cls, clock):
    # A long queue on a big busy cluster: the clock, not the (huge) evaluation cap, stops
    # every search, and decide() returns within the budget plus a small slack.
    topo = uniform(32, 8, nodes_per_switch=4)
    rng = np.random.default_rng(1)
    running = [RunningJob(f"r{k}", f"u{k % 7}", tuple(range(8 * k, 8 * k + 7)), 0.0, float(rng.uniform(0, 900)), 3600.0)
               for k in range(32)]
    pending = [PendingJob(f"j{i}", f"u{i % 9}", int(rng.choice([1, 2, 4, 8, 16])), float(rng.uniform(0, 999)),
                          time_limit=float(rng.choice([900, 3600, 14_400, 86_400])), model="bert") for i in range(2000)]
    budget_ms = 15.0
    measure = {"wall": time.perf_counter, "cpu": time.thread_time}[clock]

    def decide_times(budget: float) -> list[float]:
        chooser = cls(budget_ms=budget, max_evaluations=10**9, patience=10**9, window=48, clock=clock)
        p = Scheduler(chooser, Consolidate())
        out = []
        for k in range(15):
            s = make_state(topo, pending[k:], running=running, now=1000.0 + k)
            t0 = measure()
            check_plan(s, p.decide(s))
            out.append((measure() - t0) * 1e3)
            last = chooser.last
            assert last is not None and last.stopped_by == "time"
            assert last.evaluations > 0 or budget < 1.0
        return out

    # What a decision costs besides the search (window, starting solutions, the scheduling
    # loop, one evaluation past the deadline), measured now on this (possibly shared)
    # machine with a near-zero budget; the budget must add about itself and no more.
    overhead = statistics.median(decide_times(0.01))
    times = decide_times(budget_ms)
    assert statistics.median(times) <= budget_ms + 2 * overhead + 5.0, (overhead, sorted(times))


def blocked_head(lab):
    """24 GPUs busy for an hour; FIFO's head wants the whole cluster (32 GPUs), eight 1-GPU
    jobs of the same user (fairness is moot) wait behind it. They cannot backfill (they would outlive the head's shadow and
    nothing is spare then), so FIFO leaves node4 idle for an hour."""
    running = [RunningJob(f"r{k}", "x", tuple(range(8 * k, 8 * k + 8)), 0.0, 1000.0, 3600.0) for k in range(3)]
    pending = [job("big", gpus=32, user="alice", submit=0.0, limit=3600.0)]
    pending += [job(f"s{i}", gpus=1, user="alice", submit=1.0 + i, limit=8 * 3600.0) for i in range(8)]
    return make_state(lab, pending, running=running, now=1000.0)


@pytest.mark.parametrize("model", ["backfill", "serial"])
@pytest.mark.parametrize("cls", CHOOSERS)
def test_search_beats_fifo_on_a_blocked_queue(cls, model, lab):
    s = blocked_head(lab)
    chooser = cls(budget_ms=None, max_evaluations=200, model=model)
    look = LookAhead(s, chooser.window, chooser.weights, SlowdownTable(lab), model)
    fifo = tuple(sorted(range(look.size), key=lambda i: s.pending[look.rows[i]].submit_time))
    fifo_cost = look.evaluate(fifo, (False,) * look.size)
    assert look.schedule(fifo, (False,) * look.size).now == ()  # FIFO starts nothing now
    plan = Scheduler(chooser, Consolidate()).decide(s)
    assert chooser.last.best_cost < fifo_cost - 0.05
    started = {st.job_id for st in plan.starts}
    assert started == {f"s{i}" for i in range(8)}  # the small jobs fill the idle node now
    check_plan(s, plan)


@pytest.mark.parametrize("cls", CHOOSERS)
def test_search_improves_on_its_heuristic_starts(cls, lab):
    s = crowded(lab, 40)
    chooser = cls(budget_ms=None, max_evaluations=300, window=24)
    chooser.rank(s)
    assert chooser.last.best_cost <= chooser.last.start_cost
    assert chooser.last.best_cost < chooser.last.start_cost - 1e-6


def comm_heavy(lab, busy_for):
    """Nodes 1 and 2 have 4 free GPUs each, node 3 frees in ``busy_for`` seconds (its job's
    limit), node 4 is busy for a day; one 8-GPU YOLOv3 job (slow when split) waits."""
    running = [
        RunningJob("half1", "x", (0, 1, 2, 3), 0.0, 0.0, 86_400.0),
        RunningJob("half2", "x", (8, 9, 10, 11), 0.0, 0.0, 86_400.0),
        RunningJob("soon", "x", tuple(range(16, 24)), 0.0, 1000.0 - 10.0, busy_for + 10.0),
        RunningJob("day", "x", tuple(range(24, 32)), 0.0, 0.0, 86_400.0),
    ]
    big = PendingJob("yolo", "alice", 8, 900.0, time_limit=8 * 3600.0, model="yolov3")
    return make_state(lab, [big], running=running, now=1000.0)


@pytest.mark.parametrize("cls", CHOOSERS)
def test_waits_for_a_packed_placement_when_it_comes_soon(cls, lab):
    s = comm_heavy(lab, busy_for=120.0)
    plan = Scheduler(cls(budget_ms=None), Consolidate()).decide(s)
    assert plan.starts == () and plan.waited


@pytest.mark.parametrize("cls", CHOOSERS)
def test_starts_spread_when_a_packed_placement_is_far(cls, lab):
    s = comm_heavy(lab, busy_for=3 * 86_400.0)
    plan = Scheduler(cls(budget_ms=None), Consolidate()).decide(s)
    assert [st.job_id for st in plan.starts] == ["yolo"]
    check_plan(s, plan)


def test_look_ahead_schedule_by_hand(lab):
    # 8 free GPUs on node4; node1-3 busy until 1000+3600 (their limits; no history).
    running = [RunningJob(f"r{k}", "x", tuple(range(8 * k, 8 * k + 8)), 0.0, 1000.0, 3600.0) for k in range(3)]
    s = make_state(lab, [job("a", gpus=8, limit=600.0), job("b", gpus=4, submit=1, limit=600.0)], running=running, now=1000.0)
    look = LookAhead(s, 8, Weights(), SlowdownTable(lab))
    a, b = look.rows.index(0), look.rows.index(1)
    sched = look.schedule((a, b), (False, False))
    assert sched.start[a] == 1000.0 and sched.start[b] == 1600.0  # b waits for a (node4 is full)
    assert sched.startable == 1
    sched = look.schedule((b, a), (False, False))
    assert sched.start[b] == 1000.0 and sched.start[a] == 1600.0
    assert sched.comm_term == 0.0


def test_never_fitting_jobs_stay_out_of_the_window(lab):
    s = make_state(lab, [job("huge", gpus=16), job("ok", gpus=4, submit=1)], busy=list(range(8, 32)))
    look = LookAhead(s, 8, Weights(), SlowdownTable(lab))
    assert [s.pending[r].job_id for r in look.rows] == ["ok"]
    plan = Scheduler(Genetic(budget_ms=None), Consolidate()).decide(s)
    assert [st.job_id for st in plan.starts] == ["ok"]


def test_order_crossover_is_a_permutation():
    import random

    rng = random.Random(0)
    for _ in range(200):
        n = rng.randrange(2, 12)
        a, b = tuple(rng.sample(range(n), n)), tuple(rng.sample(range(n), n))
        assert sorted(_ox(a, b, rng)) == list(range(n))


def test_bad_parameters_are_refused():
    with pytest.raises(ValueError):
        Genetic(window=0)
    with pytest.raises(ValueError):
        Annealing(budget_ms=0)
    with pytest.raises(ValueError):
        Annealing(max_evaluations=-1)
    with pytest.raises(ValueError):
        Genetic(clock="sundial")


def test_the_searches_are_presets_with_consolidated_placement(lab):
    from attentived.agents.registry import ORDERS, PLACERS, PRESETS

    for name in ("genetic", "annealing", "portfolio"):
        p = PRESETS[name]
        assert (p.order, p.placer, p.backfill) == (name, "consolidate", False)
        pol = Scheduler(ORDERS[p.order](0), PLACERS[p.placer](0), p.backfill, name=name)
        check_plan(blocked_head(lab), pol.decide(blocked_head(lab)))


@pytest.mark.parametrize("name", ["genetic", "annealing", "portfolio", "genetic+consolidate+backfill"])
def test_the_run_seed_reaches_the_search(name):
    """`replay --seed` / `compare` seeds vary the searches' own randomness too, so their
    confidence intervals include it (they used to search with seed 0 whatever the run's)."""
    from attentived.agents.registry import make_policy

    assert [make_policy(name, seed=s).chooser.seed for s in (0, 4)] == [0, 4]


def test_a_split_is_priced_as_a_busy_cluster_makes_it(lab):
    """Nodes under different switches, each node's share over both NVLink islands: what
    the placer's splits cost, above the best case of one switch and whole islands."""
    table = SlowdownTable(lab)
    speed = table.speed
    landed = speed.slowdown("cifar10", [0, 4, 1, 5, 16, 20, 17, 21])  # node1 and node3, under two switches
    best_case = speed.slowdown("cifar10", [0, 1, 2, 3, 8, 9, 10, 11])  # node1 and node2, one switch, one island each
    assert table.row("cifar10", 8)[2] == pytest.approx(landed)
    assert landed > 1.3 * best_case
    assert table.row("cifar10", 8)[1] == 1.0 and len(table.row("cifar10", 8)) == 5  # up to 4 nodes


@pytest.mark.parametrize("backfill", [False, True])
def test_a_job_slurm_can_never_place_is_no_candidate_of_the_look_ahead(backfill):
    """An idle a100 node, an h100 job first: planned to start now, it was the only job let
    start, never started, and with nothing running the cluster idled for good."""
    topo = uniform(1, 8, nodes_per_switch=1)
    never = job("h100", gpus=8, limit=60.0, gpu_type="h100")
    state = make_state(topo, [never, job("any", gpus=8, limit=3600.0, submit=1.0)], nodes=capacity(topo, gpu_type="a100"))
    plan = Scheduler(Portfolio(seed=0), Consolidate(), backfill=backfill).decide(state)
    assert [s.job_id for s in plan.starts] == ["any"]


def test_one_jobs_estimate_and_the_queues_agree_when_a_user_ran_nothing_but_zero_second_jobs(lab):
    from attentived.agents.order import estimated_runtime, estimated_runtimes

    s = make_state(lab, [job("a", 1, user="zed", limit=3600.0)], users={"zed": UserStats(jobs=2, limit_seconds=7200.0, limited_jobs=2)})  # ran 0 s
    assert s.user("zed").limit_accuracy == 0.0
    assert estimated_runtime(s.pending[0], s) == estimated_runtimes(s)[0] == 3600.0
