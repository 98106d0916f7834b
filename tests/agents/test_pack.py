"""``POLICY:pack=1``: jobs start only packed; the first that cannot is held where it will."""

from __future__ import annotations

import numpy as np

from attentived.agents.behind_wait import fill_behind_wait
from attentived.agents.placement import packed
from attentived.agents.registry import make_policy, unsupported
from attentived.agents.state import RunningJob
from attentived.simulator.engine import Simulation, prepare_jobs
from attentived.simulator.trace import TraceJob
from attentived.topology import uniform

from .conftest import capacity, job, make_state, steer_job_agent


def _two_halves(lab, down=()):
    """Node1's GPUs 2, 3 (island 0) and 6, 7 (island 1) free; 0-1 back at 600 s, 4-5 at
    1200 s, the other nodes at 3600 s. ``down``: GPUs that run nothing (the state marks them
    busy: neither free nor coming back)."""
    running = [RunningJob("r1", "x", (0, 1), 0.0, 0.0, 600.0), RunningJob("r2", "x", (4, 5), 0.0, 0.0, 1200.0),
               RunningJob("r3", "x", tuple(range(8, 32)), 0.0, 0.0, 3600.0)]
    kept = [RunningJob(r.job_id, r.user, tuple(g for g in r.gpus if g not in down), 0.0, 0.0, r.time_limit) for r in running]
    return [r for r in kept if r.gpus]


def test_a_job_that_fits_only_spread_is_held_where_it_packs(lab):
    s = make_state(lab, [job("four", 4)], running=_two_halves(lab), now=0.0)
    spread = make_policy("fifo+consolidate").decide(s)
    assert [st.gpus for st in spread.starts] == [(2, 3, 6, 7)]  # one node, two islands
    plan = make_policy("fifo+consolidate:pack=1").decide(s)
    assert plan.starts == ()
    (hold,) = plan.holds
    assert hold.job_id == "four" and hold.gpus == (0, 1, 2, 3) and hold.expected_start == 600.0


def test_behind_the_hold_jobs_start_packed_off_it_or_in_time(lab):
    pending = [job("four", 4), job("long", 2, submit=1, limit=7200.0), job("late", 1, submit=2, limit=7200.0),
               job("short", 2, submit=3, limit=300.0)]
    s = make_state(lab, pending, running=_two_halves(lab), now=0.0)
    plan = make_policy("fifo+consolidate:pack=1").decide(s)
    # long takes island 1 (off the hold); late would then need a held GPU past 600 s; short
    # ends before 600 s, so it may use the held 2-3
    assert {st.job_id: st.gpus for st in plan.starts} == {"long": (6, 7), "short": (2, 3)}
    assert [h.job_id for h in plan.holds] == ["four"] and list(plan.order) == ["four", "long", "late", "short"]


def test_a_job_that_never_packs_starts_where_it_fits(lab):
    # node1's GPUs 0, 1, 4, 5 are down: a 4-GPU job held to node1 can never take one island
    down = (0, 1, 4, 5)
    s = make_state(lab, [job("four", 4, nodelist=("node1",))], busy=down, running=_two_halves(lab, down), now=0.0)
    plan = make_policy("fifo+consolidate:pack=1").decide(s)
    assert [st.gpus for st in plan.starts] == [(2, 3, 6, 7)]
    free_node2 = make_state(lab, [job("four", 4)], busy=down, running=_two_halves(lab, down), now=0.0)
    assert not make_policy("fifo+consolidate:pack=1").decide(free_node2).starts  # elsewhere it can: it waits


def test_a_job_that_asks_cpus_waits_for_packed_room_as_one_that_does_not(lab):
    """Whether a job can ever pack is asked of the nodes as they are once every running job
    ends, CPUs included: an eight-GPU job with CPUs is held for a whole node, and one whose
    CPUs no node holds starts spread (both waited, or never started, before)."""
    half = [RunningJob("r", "x", (0, 1, 8, 9, 16, 17, 24, 25), 0.0, 0.0, 600.0, cpus=8)]
    for cpus in (0, 8):
        s = make_state(lab, [job("eight", 8, cpus=cpus)], running=half, now=0.0, nodes=capacity(lab, cpus=62))
        plan = make_policy("fifo+consolidate:pack=1").decide(s)
        assert plan.starts == () and [(h.gpus, h.expected_start) for h in plan.holds] == [(tuple(range(8)), 600.0)]
    s = make_state(lab, [job("cpu-heavy", 4, cpus=128)], now=0.0, nodes=capacity(lab, cpus=64))
    assert [st.gpus for st in make_policy("fifo+consolidate:pack=1").decide(s).starts] == [(0, 1, 8, 9)]


def test_a_job_that_never_packs_is_held_when_it_first_fits(lab):
    """Its hold comes with the first release that gives it room anywhere, not room to pack."""
    down = (0, 1, 4, 5)
    running = [RunningJob("r1", "x", (2, 3), 0.0, 0.0, 600.0), RunningJob("r2", "x", (6, 7), 0.0, 0.0, 1200.0),
               RunningJob("r3", "x", tuple(range(8, 32)), 0.0, 0.0, 3600.0)]
    s = make_state(lab, [job("four", 4, nodelist=("node1",))], busy=down, running=running, now=0.0)
    (hold,) = make_policy("fifo+consolidate:pack=1").decide(s).holds
    assert hold.gpus == (2, 3, 6, 7) and hold.expected_start == 1200.0


def test_the_packed_placer_is_the_one_asked_what_it_supports():
    big = uniform(32, 8, nodes_per_switch=4)  # more GPUs than proximity-drl's network reads
    assert unsupported(make_policy("proximity-drl"), big)
    assert unsupported(make_policy("proximity-drl:pack=1"), big) is None  # its placer is replaced


def test_a_job_that_fixed_its_node_count_is_packed_by_its_shape(lab):
    assert packed(lab, (2, 3, 10, 11), num_nodes=2) and not packed(lab, (2, 3, 10, 11))
    assert not packed(lab, (2, 6, 10, 14), num_nodes=2)  # two islands on each node
    running = [RunningJob("r", "x", tuple(g for g in range(32) if g not in (2, 3, 10, 11)), 0.0, 0.0, 600.0)]
    s = make_state(lab, [job("pair", 4, nodes=2)], running=running, now=0.0)
    assert [st.gpus for st in make_policy("fifo+consolidate:pack=1").decide(s).starts] == [(2, 3, 10, 11)]
    assert [st.gpus for st in fill_behind_wait(s, s.pending, None)] == [(2, 3, 10, 11)]


def test_fewest_nodes_beat_one_switch(lab):
    # 16 GPUs: switch 0 has 14 free (node1 whole, node2 six), node3 is whole on switch 1
    s = make_state(lab, [job("wide", 16)], running=[RunningJob("r", "x", (8, 9, *range(24, 32)), 0.0, 0.0, 600.0)], now=0.0)
    (spread,) = make_policy("fifo+consolidate").decide(s).starts
    assert len(set(lab.gpu_node[list(spread.gpus)])) == 3
    (start,) = make_policy("fifo+consolidate:pack=1").decide(s).starts
    assert start.gpus == (*range(8), *range(16, 24))


def test_a_learned_policy_keeps_its_order(lab):
    # one island free (0-3): the job the model ranks first takes it, the other is held
    s = make_state(lab, [job("a", 4), job("b", 4, submit=1)], running=[RunningJob("r", "x", tuple(range(4, 32)), 0.0, 0.0, 600.0)],
                   now=0.0)
    for first, steer in (("a", {0: 1e6, 1: -1e6}), ("b", {0: -1e6, 1: 1e6})):
        pol = make_policy("attentive:pack=1")
        steer_job_agent(pol.inner, {**steer, -1: -1e6})
        plan = pol.decide(s)
        assert [st.job_id for st in plan.starts] == [first] and plan.starts[0].gpus == (0, 1, 2, 3)
        assert pol.name == "attentive:pack=1" and not pol.needs_oracle


def test_in_a_replay_every_job_runs_packed_and_all_finish(lab):
    rng = np.random.default_rng(3)
    jobs = prepare_jobs([TraceJob(f"j{i}", i * 20.0, f"u{i % 3}", int(rng.choice([1, 2, 3, 4, 6, 8, 16])),
                                  float(rng.integers(300, 3000)), None, i + 1) for i in range(80)], seed=1)
    spread = {}
    for name in ("sjf+consolidate", "sjf+consolidate:pack=1", "slurm:pack=1"):
        result = Simulation(jobs, lab, make_policy(name)).run()
        assert len(result.records) == len(jobs), name
        spread[name] = sum(not packed(lab, tuple(r.gpus)) for r in result.records)
    assert spread["sjf+consolidate"] > 0
    assert spread["sjf+consolidate:pack=1"] == spread["slurm:pack=1"] == 0
