"""The ``protect`` setting of the look-ahead and the job agents (issue 14): a job whose wait has slowed it down by
``protect`` goes first in every solution the model plays, so the list schedule reserves
for it and only what does not delay it starts before it. Off (0), a completion-time
objective keeps starting one-GPU jobs on every GPU that frees while a short two-GPU job
waits for two at once (a 28-second job waited two hours on a validation window)."""

from __future__ import annotations

import random

import pytest

from attentived.agents.annealing import Annealing
from attentived.agents.fit import Fit
from attentived.agents.genetic import Genetic
from attentived.agents.learned import load_learned
from attentived.agents.metaheuristic import Portfolio
from attentived.agents.objective import LookAhead, SlowdownTable, Weights
from attentived.agents.placement import Consolidate
from attentived.agents.policy import Scheduler
from attentived.agents.registry import make_policy, parse_name
from attentived.agents.spec import BadPolicyName
from attentived.agents.state import RunningJob, UserStats

from .conftest import capacity, job, make_state, steer_job_agent

ALL_CHOOSERS = (Genetic, Annealing, Portfolio)


def one_gpu_free(lab, backfill_limit=4 * 3600.0):
    """31 of 32 GPUs busy with one-GPU jobs, one ending every minute from now on. Sue's
    two-GPU job (15-minute limit) has waited an hour: slowed down 5x already. Bob's
    one-GPU jobs, four-hour limits, arrived since."""
    now = 10_000.0
    running = [RunningJob(f"r{g}", "x", (g,), now - 600.0, now - 600.0, 600.0 + 60.0 * g) for g in range(1, 32)]
    pending = [job("sue", gpus=2, user="sue", submit=now - 3600.0, limit=900.0)]
    pending += [job(f"bob{k}", gpus=1, user="bob", submit=now - 60.0 + k, limit=backfill_limit) for k in range(6)]
    users = {"sue": UserStats(jobs=20, gpu_seconds=20 * 600.0, wait_seconds=0.0, run_seconds=20 * 600.0),
             "bob": UserStats(jobs=20, gpu_seconds=20 * 3600.0, wait_seconds=0.0, run_seconds=20 * 3600.0)}
    return make_state(lab, pending, running=running, now=now, users=users)


def started(state, chooser):
    return [s.job_id for s in Scheduler(chooser, Consolidate()).decide(state).starts]


@pytest.mark.parametrize("cls", ALL_CHOOSERS)
def test_a_protected_job_keeps_the_free_gpu_from_a_job_that_would_outlast_its_reservation(cls, lab):
    s = one_gpu_free(lab)
    assert started(s, cls(budget_ms=None, fairness=0.0, protect=0)) == ["bob0"]  # off: the free GPU goes to Bob
    assert started(s, cls(budget_ms=None, fairness=0.0, protect=6.0)) == ["bob0"]  # Sue is not slowed 6x yet
    assert started(s, cls(budget_ms=None, fairness=0.0, protect=3.0)) == []  # kept: Sue starts in a minute
    assert started(s, cls(budget_ms=None, fairness=0.0)) == ["bob0"]  # off by default


@pytest.mark.parametrize("cls", ALL_CHOOSERS)
def test_jobs_that_end_before_the_reservation_still_backfill(cls, lab):
    s = one_gpu_free(lab, backfill_limit=30.0)  # Bob's jobs end before the next GPU frees
    assert started(s, cls(budget_ms=None, fairness=0.0, protect=3.0)) == ["bob0"]


def test_protected_jobs_go_first_in_the_costs_order_in_every_order(lab):
    s = one_gpu_free(lab)
    older = job("ann", gpus=4, user="ann", submit=s.now - 2 * 3600.0, limit=1800.0)  # slowed 5x, a longer estimate
    s = make_state(lab, [*s.pending, older], running=s.running, now=s.now, users=s.users)
    la = LookAhead(s, 16, Weights(), SlowdownTable(lab), fairness=0.0, protect=3.0)
    ids = [s.pending[r].job_id for r in la.rows]
    assert [ids[i] for i in la.protected] == ["sue", "ann"]  # at W = 0 the shorter first (Smith's rule)
    rng = random.Random(0)
    for _ in range(5):
        order = tuple(rng.sample(range(la.size), la.size))
        played = la.ordered(order)
        assert [ids[i] for i in played[:2]] == ["sue", "ann"]
        assert [i for i in played[2:]] == [i for i in order if i not in la.protected]
        pack = (False,) * la.size
        assert la.evaluate(order, pack) == la.evaluate(played, pack)  # the same schedule


def test_a_protected_job_that_fits_now_starts_first(lab):
    s = one_gpu_free(lab, backfill_limit=900.0)  # Bob's jobs as short as Sue's
    running = [r for r in s.running if r.gpus[0] != 1]  # a second GPU free, on node 0
    s = make_state(lab, s.pending, running=running, now=s.now, users=s.users)
    assert started(s, Portfolio(fairness=0.0, protect=0)) == ["bob0", "bob1"]  # off: two jobs done sooner than one
    assert started(s, Portfolio(fairness=0.0, protect=3.0)) == ["sue"]


def test_protect_is_a_parameter_of_the_look_ahead_policies_only():
    assert parse_name("portfolio:protect=2").kwargs() == {"protect": 2.0}
    assert make_policy("genetic:fairness=0.5,protect=3").chooser.protect == 3.0
    assert make_policy("portfolio").chooser.protect == 0.0  # off by default
    for bad in ("portfolio:protect=0.5", "portfolio:protect=-1", "portfolio:protect=nan", "portfolio:protect=inf",
                "sjf:protect=2"):
        with pytest.raises(BadPolicyName, match="protect"):
            parse_name(bad)
    with pytest.raises(ValueError, match="protect"):
        Portfolio(protect=0.9)


# ---- the learned two-phase policies: the same guard around the network's choices ----


def agent(protect=None):
    if protect is None:
        return load_learned("attentive")  # the shipped model, protect off by default
    return load_learned("attentive", protect=protect)


def never_waits(pol):
    """``pol`` with its job agent's WAIT logit pushed far down: a network that starts a job
    whenever one fits (the shipped model holds the GPU for Sue on its own)."""
    return steer_job_agent(pol, {-1: -1e6})


def test_the_agent_keeps_the_free_gpu_for_a_protected_job(lab):
    s = one_gpu_free(lab)
    assert [st.job_id for st in never_waits(agent()).decide(s).starts] == ["bob0"]  # off: the network fills the GPU
    plan = never_waits(agent(protect=3.0)).decide(s)
    assert plan.starts == () and [h.job_id for h in plan.holds] == ["sue"] and plan.order[0] == "sue"
    assert set(plan.holds[0].gpus) >= {0}  # the free GPU is among those kept
    assert sorted(plan.order) == sorted(j.job_id for j in s.pending)


def test_behind_the_agents_hold_jobs_that_end_in_time_start(lab):
    s = one_gpu_free(lab, backfill_limit=30.0)
    plan = agent(protect=3.0).decide(s)
    assert [st.job_id for st in plan.starts] == ["bob0"] and [h.job_id for h in plan.holds] == ["sue"]
    assert plan.order[:2] == ("bob0", "sue")


def test_the_agent_starts_a_protected_job_that_fits_first(lab):
    s = one_gpu_free(lab)
    running = [r for r in s.running if r.gpus[0] not in (1, 2, 3)]  # GPUs 0-3 free on node 0
    s = make_state(lab, s.pending, running=running, now=s.now, users=s.users)
    plan = agent(protect=3.0).decide(s)
    assert plan.starts[0].job_id == "sue" and len(plan.starts[0].gpus) == 2
    assert [st.job_id for st in plan.starts[1:]] == ["bob0", "bob1"]  # then the network fills the rest
    assert plan.order[: len(plan.starts)] == tuple(st.job_id for st in plan.starts)


def test_agents_take_protect_by_name():
    assert make_policy("attentive:protect=2").protect == 2.0
    assert make_policy("deeprm:protect=2").protect == 2.0
    assert make_policy("attentive").protect == 0.0
    with pytest.raises(BadPolicyName, match="protect"):
        parse_name("attentive:protect=0.2")
    with pytest.raises(BadPolicyName):
        parse_name("proximity-drl:protect=2")



@pytest.mark.parametrize("request_kind", ["cpus", "exclusive"])
def test_behind_the_agents_hold_later_starts_respect_what_earlier_ones_took(lab, request_kind):
    """Protected P (8 h100 GPUs, only node 0 has them) is held; node 1 is idle. X, whose
    request takes node 1 whole (all its CPUs, or --exclusive), and Y both fit there one at
    a time. The plan's starts must be startable in their order, as Slurm would check."""
    now = 10_000.0
    running = [RunningJob("r0", "x", (0, 1, 2, 3), now - 600, now - 600, 660.0),
               RunningJob("r2", "x", tuple(range(16, 24)), now - 600, now - 600, 86_400.0),
               RunningJob("r3", "x", tuple(range(24, 32)), now - 600, now - 600, 86_400.0)]
    nodes = capacity(lab, cpus=64, gpu_type=["h100", "a100", "a100", "a100"], idle=[False, True, False, False])
    x = {"cpus": 64} if request_kind == "cpus" else {"exclusive": True}
    pending = [job("P", gpus=8, user="sue", submit=now - 3600, limit=900.0, gpu_type="h100"),
               job("X", gpus=1, user="bob", submit=now - 30, limit=4 * 3600.0, **x),
               job("Y", gpus=1, user="bob", submit=now - 20, limit=4 * 3600.0, cpus=8)]
    users = {u: UserStats(jobs=5, gpu_seconds=3000, wait_seconds=0, run_seconds=3000) for u in ("sue", "bob")}
    s = make_state(lab, pending, running=running, now=now, users=users, nodes=nodes)
    plan = agent(protect=3.0).decide(s)
    assert [h.job_id for h in plan.holds] == ["P"] and plan.starts
    fit, free = Fit.of(s), s.free.copy()
    by_id = {j.job_id: j for j in s.pending}
    for st in plan.starts:
        usable = fit.usable(by_id[st.job_id], free)
        assert usable[list(st.gpus)].all(), f"{st.job_id} on {st.gpus}: not startable after the starts before it"
        free[list(fit.take(by_id[st.job_id], st.gpus))] = False
