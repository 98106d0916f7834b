"""Slurm's backfill (`SlurmBackfill`, the ``slurm`` preset's): every job it tests reserves,
so no job starts that would delay one above it, unlike EASY backfill, which protects the
first blocked job only."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attentived.agents.order import Fifo
from attentived.agents.placement import FirstFit
from attentived.agents.policy import Scheduler
from attentived.agents.registry import BadPolicyName, make_policy
from attentived.agents.slurm_backfill import SlurmBackfill, will_run_batches
from attentived.agents.state import RunningJob
from attentived.simulator.engine import SimJob, Simulation
from attentived.simulator.trace import TraceJob
from attentived.topology import uniform

from .conftest import job, make_state


def three_nodes_busy():
    """3 nodes x 2 GPUs at t = 0 (jobs A and B below ask one node each): node0 busy until
    2000, node1's GPU 2 until 50, node2's GPU 4 until 800; GPUs 3 and 5 free. The ends are
    far enough apart for slurmctld's will-run test to take each in a batch of its own."""
    topo = uniform(3, 2)
    running = [RunningJob("r0", "x", (0, 1), 0.0, -10.0, 2010.0), RunningJob("r1", "x", (2,), 0.0, -10.0, 60.0),
               RunningJob("r2", "x", (4,), 0.0, -10.0, 810.0)]
    return topo, running


def starts(policy, state):
    return {s.job_id: s.gpus for s in policy.decide(state).starts}


def slurm_backfill(**kw):
    return SlurmBackfill(Fifo(), FirstFit(), resolution=1.0, **kw)


def test_a_job_that_would_delay_the_second_blocked_job_waits():
    """A reserves node1 from 50 (for 1000 s), B node2 from 800. D (one GPU for 1000 s) fits on node2 now
    but would push B back: Slurm keeps it waiting, EASY (protecting A alone) starts it. E
    ends before B's reservation and starts under both."""
    topo, running = three_nodes_busy()
    pending = [job("A", 2, submit=0, limit=1000, nodes=1), job("B", 2, submit=1, limit=100, nodes=1),
               job("D", 1, submit=2, limit=1000), job("E", 1, submit=3, limit=60)]
    s = make_state(topo, pending, running=running, now=0.0)
    easy = starts(Scheduler(Fifo(), FirstFit(), backfill=True), s)
    assert "D" in easy
    slurm = starts(slurm_backfill(), s)
    assert "D" not in slurm and slurm["E"] == (5,)


def test_a_reservation_takes_its_nodes_whole():
    # 2 nodes x 8 GPUs: node0 has 6 GPUs busy until 100, node1 is busy until 5000. A (4 GPUs)
    # is reserved node0 from 100. slurmctld's backfill map (node_space) takes a reserved
    # job's nodes whole: B (1 GPU, an hour) would overlap the reservation, so it may not
    # use node0's 2 free GPUs, though 4 would be left beside A; C (50 s) ends before it.
    # On the lab, counting only the reserved GPUs had 1-GPU jobs backfilled that Slurm kept
    # waiting (80-job demo, seed 15: Slurm alone's avg wait predicted 13% short).
    topo = uniform(2, 8)
    running = [RunningJob("r0", "x", tuple(range(6)), 0.0, -10.0, 110.0),
               RunningJob("r1", "x", tuple(range(8, 16)), 0.0, -10.0, 5010.0)]
    pending = [job("A", 4, submit=0), job("B", 1, submit=1, limit=3600.0), job("C", 1, submit=2, limit=50.0)]
    got = starts(slurm_backfill(), make_state(topo, pending, running=running, now=0.0))
    assert set(got) == {"C"}


def test_a_job_without_a_time_limit_is_planned_for_a_year():
    """slurmctld's backfill takes a job with no limit (``UNLIMITED``) to run a year
    (``YEAR_MINUTES``, backfill.c). The preset raised OverflowError on such a job. Here the
    first starts; the second, blocked, holds node0 from 100 s on, so only C (50 s) passes."""
    topo = uniform(2, 8)
    running = [RunningJob("r0", "x", tuple(range(6)), 0.0, -10.0, 110.0)]
    pending = [job("U", 8, submit=0, limit=None), job("A", 4, submit=1, limit=None),
               job("B", 1, submit=2, limit=3600.0), job("C", 1, submit=3, limit=50.0)]
    got = starts(slurm_backfill(), make_state(topo, pending, running=running, now=0.0))
    assert set(got) == {"U", "C"}
    assert got["U"] == tuple(range(8, 16))


def test_a_job_ending_just_as_a_reservation_begins_may_not_use_its_nodes():
    """slurmctld tests a job against every backfill slot with ``begin_time <= end_time``,
    so ending exactly at a reservation's start counts as overlapping it. The lab's case:
    2 nodes x 8 GPUs, node1 busy for an hour; A (1 GPU, 60 s) takes node0 now, so B (8
    GPUs) is reserved node0 from 60; C (1 GPU, 60 s) would end just then and waits; D
    (59 s) ends before and starts."""
    topo = uniform(2, 8)
    running = [RunningJob("r1", "x", tuple(range(8, 16)), 0.0, -10.0, 3600.0)]
    pending = [job("A", 1, submit=0, limit=60.0), job("B", 8, submit=1, limit=3600.0, nodes=1),
               job("C", 1, submit=2, limit=60.0), job("D", 1, submit=3, limit=59.0)]
    got = starts(slurm_backfill(), make_state(topo, pending, running=running, now=0.0))
    assert set(got) == {"A", "D"}


def test_the_will_run_test_takes_running_jobs_ends_in_doubling_windows():
    # First batch: to 30 s past the first end's next multiple of 30 s (on slurmctld's clock);
    # then the window doubles, and doubles again until it reaches the next end.
    ends = [50.0, 80.0, 100.0, 1000.0, 5000.0]
    assert will_run_batches(ends) == [80.0, 80.0, 100.0, 1000.0, 5000.0]
    assert will_run_batches(ends, clock_phase=15.0) == [100.0, 100.0, 100.0, 1000.0, 5000.0]
    assert will_run_batches([]) == []


@pytest.mark.parametrize(("clock_phase", "y_starts"), [(0.0, False), (20.0, True)])
def test_a_reservation_starts_at_its_batchs_last_end(clock_phase, y_starts):
    """One node, GPU 7 free; GPU 6 back at 56, GPUs 0-3 at 100. X (2 GPUs) fits from 56,
    but slurmctld reserves it from the last end of that batch: with the clock 20 s on,
    the first batch reaches 100, so Y (1 GPU, 60 s) ends before X's reservation and runs
    now; with the clock at 0 it reaches 90 only, X is reserved from 56 and Y waits (the
    lab's seed 19 had Slurm start such a Y)."""
    topo = uniform(1, 8)
    running = [RunningJob("a", "x", (6,), 0.0, -4.0, 60.0), RunningJob("b", "x", (0, 1, 2, 3), 0.0, -20.0, 120.0),
               RunningJob("c", "x", (4, 5), 0.0, -20.0)]
    pending = [job("X", 2, submit=0, limit=60.0), job("Y", 1, submit=1, limit=60.0)]
    policy = SlurmBackfill(Fifo(), FirstFit(), resolution=1.0, clock_phase=clock_phase)
    got = starts(policy, make_state(topo, pending, running=running, now=0.0))
    assert got == ({"Y": (7,)} if y_starts else {})


def test_no_reservation_beyond_the_window():
    """With a 60 s window A (50 s away) is reserved and B (800 s away) is not, so D may take
    node2 now; tested two jobs deep, D is not even considered."""
    topo, running = three_nodes_busy()
    pending = [job("A", 2, submit=0, limit=1000, nodes=1), job("B", 2, submit=1, limit=100, nodes=1),
               job("D", 1, submit=2, limit=1000)]
    s = make_state(topo, pending, running=running, now=0.0)
    assert starts(slurm_backfill(window=60.0), s) == {"D": (5,)}
    assert starts(slurm_backfill(max_job_test=2), s) == {}  # D is not even tested


def test_the_slurm_preset_runs_slurms_backfill_and_takes_its_settings():
    p = make_policy("slurm:bf_resolution=1,bf_window=3600,bf_max_job_test=20,bf_clock_phase=12.5")
    assert isinstance(p, SlurmBackfill) and (p.resolution, p.window, p.max_job_test, p.clock_phase) == (1.0, 3600.0, 20, 12.5)
    assert isinstance(make_policy("slurm-multifactor+first-fit"), Scheduler)  # no backfill: the main pass alone
    for bad in ("slurm:bf_resolution=0", "slurm:bf_max_job_test=0", "slurm:bf_window=-5", "slurm:bf_clock_phase=-1",
                "sjf+backfill:bf_window=60"):
        with pytest.raises(BadPolicyName):
            make_policy(bad)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.floats(0, 200), st.floats(1, 120), st.sampled_from([1, 1, 2, 3, 4, 8]),
                          st.sampled_from([None, 1, 2]), st.floats(1.0, 3.0)), min_size=1, max_size=30))
def test_replays_are_valid_complete_and_deterministic(jobs):
    """Random workloads (limits 1-3x the durations, fixed and free node shapes): the engine
    checks every start (free GPUs, node shape), every job ends, and a rerun is identical."""
    topo = uniform(2, 4)
    trace = []
    for i, (submit, duration, gpus, nodes, over) in enumerate(jobs):
        if nodes is not None and (gpus % nodes or gpus // nodes > 4):  # a node has 4 GPUs
            nodes = None
        trace.append(SimJob(TraceJob(f"j{i}", submit, "u", gpus, duration, None, num_nodes=nodes, line=i), duration * over,
                            "resnet50"))
    first = Simulation(trace, topo, slurm_backfill(), cadence=1.0).run().records
    assert len(first) == len(trace)
    assert first == Simulation(trace, topo, slurm_backfill(), cadence=1.0).run().records
