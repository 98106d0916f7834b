from __future__ import annotations

import pytest

from attentived.agents.order import (
    FairShare,
    Fifo,
    OracleShortestJobFirst,
    ShortestJobFirst,
    SlurmMultifactor,
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
