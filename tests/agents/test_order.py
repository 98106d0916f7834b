from __future__ import annotations

import numpy as np
import pytest

from attentived.agents.order import (
    FairShare,
    Fifo,
    OracleShortestJobFirst,
    ShortestJobFirst,
    SlurmMultifactor,
    SortedOnRead,
    Tiresias,
)
from attentived.agents.state import PendingJob, RunningJob, UserStats

from .conftest import job, make_state


def ids(state, ranking):
    return [state.pending[i].job_id for i in ranking.order]


def test_fifo_orders_by_submit_then_id(lab):
    s = make_state(lab, [job("c", submit=5), job("a", submit=9), job("b", submit=5)])
    assert ids(s, Fifo().rank(s)) == ["b", "c", "a"]


def test_sjf_uses_limits_sharpened_by_user_history(lab):
    # bob asks for 4 h but historically uses a quarter of his limits: 1 h expected,
    # shorter than alice's honest 2 h.
    users = {"bob": UserStats(jobs=4, run_seconds=4 * 900.0, limit_seconds=4 * 3600.0, limited_jobs=4)}
    s = make_state(lab, [job("a", user="alice", limit=7200), job("b", user="bob", limit=14400),
                         PendingJob("c", "carol", 1, 0.0, time_limit=None)], users=users)
    assert ids(s, ShortestJobFirst().rank(s)) == ["b", "a", "c"]


def test_oracle_sjf_refuses_without_durations(lab):
    s = make_state(lab, [job("a")])
    with pytest.raises(ValueError, match="oracle"):
        OracleShortestJobFirst().rank(s)


def test_fair_share_counts_running_jobs(lab):
    running = [RunningJob("r", "alice", (0, 1), 0.0, 900.0, 3600.0)]  # 2 GPUs x 100 s by now
    users = {"bob": UserStats(jobs=1, gpu_seconds=150.0)}
    s = make_state(lab, [job("a1", user="alice", submit=1), job("b1", user="bob", submit=2), job("c1", user="carol", submit=3)],
                   running=running, users=users)
    assert ids(s, FairShare().rank(s)) == ["c1", "b1", "a1"]


def test_tiresias_small_service_first_and_starved_jobs_promoted(lab):
    big = job("big", gpus=8, submit=0, limit=36_000)     # 288,000 GPU-s: third queue
    small = job("small", gpus=1, submit=500, limit=1800)  # 1,800 GPU-s: first queue
    s = make_state(lab, [big, small], now=1000)
    assert ids(s, Tiresias().rank(s)) == ["small", "big"]
    starving = job("old", gpus=8, submit=0, limit=1000)  # waited 100,000 s > 2 x 1000 s
    s = make_state(lab, [small, starving], now=100_000)
    assert ids(s, Tiresias().rank(s)) == ["old", "small"]


def test_slurm_multifactor_age_beats_size_after_long_waits(lab):
    s = make_state(lab, [job("old", gpus=1, submit=0), job("wide", gpus=32, submit=7 * 86400 - 10)], now=7 * 86400)
    assert ids(s, SlurmMultifactor().rank(s)) == ["old", "wide"]
    s = make_state(lab, [job("young", gpus=1, submit=990), job("wide", gpus=32, submit=995)], now=1000)
    assert ids(s, SlurmMultifactor().rank(s)) == ["wide", "young"]


def _with_cpus(topo, cpus):
    from dataclasses import replace

    return replace(topo, nodes=tuple(replace(n, cpus=cpus) for n in topo.nodes))


def test_slurm_job_size_factor_is_what_sprio_showed_on_the_lab(lab):
    # the lab: 4 nodes x 8 CPUs; sprio gave JOBSIZE 141 (shown truncated to 140 in the total)
    # for a 1-node 1-CPU job and 281 for a 2-node 2-CPU job at PriorityWeightJobSize=1000
    s = make_state(_with_cpus(lab, 8), [job("one", gpus=2), job("two", gpus=16, nodes=2), job("cpus", gpus=1, cpus=8)])
    assert [int(1000 * f) for f in SlurmMultifactor.size_factors(s)] == [140, 281, 250]
    # without CPU counts the node share stands for both halves
    assert SlurmMultifactor.size_factors(make_state(lab, [job("one", gpus=2)])).tolist() == [0.25]


def test_slurm_fair_share_ranks_users_by_usage_ties_sharing_a_rank(lab):
    # as sshare showed on the lab: equal usage shares a rank, the least-used user ranks first
    users = {"alice": UserStats(jobs=1, gpu_seconds=111.0), "bob": UserStats(jobs=1, gpu_seconds=111.0)}
    s = make_state(lab, [job("a", user="alice", submit=1), job("b", user="bob", submit=2), job("c", user="carol", submit=3)],
                   users=users)
    m = SlurmMultifactor()
    m.rank(s)
    factors = dict(zip(s.queue.users, m.fairshare_factors(s.queue.users).tolist()))
    assert factors == {"alice": pytest.approx(2 / 3), "bob": pytest.approx(2 / 3), "carol": 1.0}
    assert ids(s, m.rank(s)) == ["c", "a", "b"]
    assert ids(s, SlurmMultifactor(weight_fairshare=0).rank(s)) == ["a", "b", "c"]  # a site without slurmdbd


def test_slurm_fair_share_counts_running_jobs_only_at_its_calc_period(lab):
    # carol has run 2 GPUs since t=1000; at t=1100 slurmctld last summed usage at t=1080
    running = [RunningJob("r", "carol", (0, 1), 0.0, 1000.0, 3600.0)]
    users = {"alice": UserStats(jobs=1, gpu_seconds=100.0)}
    s = make_state(lab, [job("a", user="alice", submit=1), job("c", user="carol", submit=2)], running=running,
                   users=users, now=1100.0)
    # counted up to the tick: carol 2 x 80 = 160 > alice's 100, so alice ranks first
    assert ids(s, SlurmMultifactor(calc_period=60).rank(s)) == ["a", "c"]
    # a tick at 1050: carol 100 = alice 100, a tie: arrival order
    assert ids(s, SlurmMultifactor(calc_period=525).rank(s)) == ["a", "c"]
    # a tick at 1000: carol has nothing counted yet
    assert ids(s, SlurmMultifactor(calc_period=500).rank(s)) == ["c", "a"]


def test_slurm_priorities_hold_between_calculation_ticks(lab):
    # slurmctld sets a job's priority when it is submitted and recomputes all of them only
    # every PriorityCalcPeriod: alice's usage grows past bob's within a tick, and only the
    # next tick reorders their jobs
    m = SlurmMultifactor(calc_period=60)
    pending = [job("a", user="alice", submit=1), job("b", user="bob", submit=2)]
    users = {"alice": UserStats(jobs=1, gpu_seconds=10.0), "bob": UserStats(jobs=1, gpu_seconds=50.0)}
    s = make_state(lab, pending, users=users, now=1000.0)
    assert ids(s, m.rank(s)) == ["a", "b"]
    later = {"alice": UserStats(jobs=2, gpu_seconds=90.0), "bob": users["bob"]}
    s = make_state(lab, pending + [job("c", user="alice", submit=1010)], users=later, now=1010.0)
    assert ids(s, m.rank(s)) == ["a", "c", "b"]  # c is priced at its submission with the tick's usage
    s = make_state(lab, pending, users=later, now=1020.0)  # the tick at 1020: alice now ranks behind bob
    assert ids(s, m.rank(s)) == ["b", "a"]


def test_slurm_usage_leaves_out_what_ended_after_the_tick(lab):
    # the tick at 1080: carol's 2-GPU job ran 1000-1090, so slurmctld has 2 x 80 = 160 of its
    # 180 GPU-s; alice has 170: carol ranks first, as when her job is still running
    m = SlurmMultifactor(calc_period=60)
    running = [RunningJob("r", "carol", (0, 1), 0.0, 1000.0, 3600.0)]
    pending = [job("a", user="alice", submit=1), job("c", user="carol", submit=2)]
    users = {"alice": UserStats(jobs=1, gpu_seconds=170.0)}
    m.rank(make_state(lab, pending, running=running, users=users, now=1070.0))
    ended = {**users, "carol": UserStats(jobs=1, gpu_seconds=180.0)}
    s = make_state(lab, pending, users=ended, now=1090.0)
    assert m.usage_at(s, 1080.0)["carol"] == 160.0
    assert ids(s, m.rank(s)) == ["c", "a"]


def test_without_limits_enforcement_only_the_runs_at_ticks_are_charged(lab):
    # the lab (AccountingStorageEnforce=associations, 80-job demo seed 13): at the tick of
    # 1080 alice's many short jobs had ended (200 GPU-s, none running then) and bob had a
    # 4-GPU job running since 1070. slurmctld charged bob 40 and alice nothing, so alice's
    # jobs went first; with limits enforced her 200 count and bob's go first.
    pending = [job("b", user="bob", submit=1), job("a", user="alice", submit=2)]
    running = [RunningJob("r", "bob", (0, 1, 2, 3), 0.0, 1070.0, 3600.0)]
    users = {"alice": UserStats(jobs=20, gpu_seconds=200.0)}
    early = make_state(lab, pending, users={}, now=1010.0)  # before the tick: nothing ran yet
    s = make_state(lab, pending, running=running, users=users, now=1085.0)
    lab_site = SlurmMultifactor(calc_period=60, usage_at_end=False)
    lab_site.rank(early)
    assert ids(s, lab_site.rank(s)) == ["a", "b"]
    assert lab_site._usage == {"alice": 0.0, "bob": 40.0}
    site = SlurmMultifactor(calc_period=60)
    site.rank(early)
    assert ids(s, site.rank(s)) == ["b", "a"]
    # the next tick charges bob's job for the 60 s since the last one, not again from its start
    later = make_state(lab, pending, running=running, users=users, now=1141.0)
    lab_site.rank(later)
    assert lab_site._usage["bob"] == 40.0 + 4 * 60


def test_slurm_ticks_are_counted_not_compared_as_times(lab):
    # a fractional phase: times in one period must give one tick (a float tick time did not)
    m = SlurmMultifactor(calc_period=60, calc_offset=12.3)
    users = {"alice": UserStats(jobs=1, gpu_seconds=10.0), "bob": UserStats(jobs=1, gpu_seconds=50.0)}
    m.rank(make_state(lab, [job("a", user="alice", submit=1)], users=users, now=524.002))
    later = {"alice": UserStats(jobs=2, gpu_seconds=90.0), "bob": users["bob"]}
    s = make_state(lab, [job("a", user="alice", submit=1), job("b", user="bob", submit=2)], users=later, now=549.888)
    assert ids(s, m.rank(s)) == ["a", "b"]  # still the tick of 492.3: alice's usage there was 10


def test_the_next_change_of_a_policy_is_its_choosers_next_calculation_tick():
    from attentived.agents.policy import next_change
    from attentived.agents.registry import make_policy

    assert SlurmMultifactor(calc_period=60, calc_offset=12.3).next_change(100.0) == pytest.approx(132.3)
    assert SlurmMultifactor(calc_period=60, calc_offset=12.3).next_change(132.3) == pytest.approx(192.3)  # strictly after
    assert next_change(make_policy("slurm:calc_period=60,calc_offset=12.3"), 0.0) == pytest.approx(12.3)
    assert next_change(make_policy("slurm-multifactor+first-fit"), 299.0) == pytest.approx(300.0)
    assert next_change(make_policy("fifo"), 10.0) is None  # an order that changes only with the queue


@pytest.mark.parametrize("values", [
    pytest.param(lambda rng: rng.integers(0, 5, 300).astype(float), id="many ties"),
    pytest.param(lambda rng: rng.random(300), id="distinct"),
    pytest.param(lambda rng: np.where(rng.random(300) < 0.3, np.inf, rng.random(300)), id="no limits (inf)"),
    pytest.param(lambda rng: np.where(rng.random(300) < 0.9, np.nan, rng.random(300)), id="mostly NaN"),
])
def test_a_ranking_sorted_on_read_is_the_full_sort_at_every_position(values):
    rng = np.random.default_rng(0)
    first, second = values(rng), rng.integers(0, 3, 300).astype(float)
    seq = rng.permutation(300)
    want = np.lexsort((seq, second, first))
    for read in ([0, 1, 2, 40, 41, 299], [299], [5, 100, 16, 0]):
        order = SortedOnRead(seq, (first, second))
        assert [order[i] for i in read] == want[read].tolist()
        assert np.asarray(order).tolist() == want.tolist() and list(order) == want.tolist()
    assert SortedOnRead(seq, (first, second))[-1] == want[-1]
    in_place = np.lexsort((second, first))  # without seq: ties by index
    assert [SortedOnRead(None, (first, second))[i] for i in (0, 1, 17)] == in_place[[0, 1, 17]].tolist()
    assert np.asarray(SortedOnRead(None, (first, second))).tolist() == in_place.tolist()
    alone = np.lexsort((first,))  # one key, no seq: the head by argmin
    assert [SortedOnRead(None, (first,))[i] for i in (0, 1, 2, 50)] == alone[[0, 1, 2, 50]].tolist()
    with pytest.raises(IndexError):
        SortedOnRead(seq, (first, second))[300]
    order = SortedOnRead(seq, (first, second))
    np.array(order)[0] = -1  # a copy: the ranking is unchanged
    assert order[0] == want[0] and not np.asarray(order).flags.writeable
