from __future__ import annotations

import warnings
from dataclasses import replace

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attentived.simulator.engine import SimJob, prepare_jobs
from attentived.simulator.metrics import summarize
from attentived.simulator.trace import Trace, TraceJob
from attentived.topology import uniform
from attentived.training.gym_env import (
    Episode,
    FixedEpisode,
    Mixture,
    SchedulingEnv,
    TraceWindows,
    _at_load,
)
from attentived.training.reward import RewardWeights, user_wait_power_mean


def tj(i, submit, duration, gpus=1, user="alice", model=None):
    return TraceJob(f"j{i}", submit, user, gpus, duration, model, i + 2)


def toy_jobs(n=30, seed=0) -> list[SimJob]:
    rng = np.random.default_rng(seed)
    jobs = [
        tj(i, float(i * 40), float(rng.integers(60, 1200)), gpus=int(rng.choice([1, 1, 2, 4, 8])), user=f"u{i % 3}",
           model=str(rng.choice(["bert", "resnet50", "vgg16"])))
        for i in range(n)
    ]
    return prepare_jobs(jobs, seed)


def toy_env(n=30, nodes=2, **kwargs) -> SchedulingEnv:
    episode = Episode(tuple(toy_jobs(n)), uniform(nodes, 8, nodes_per_switch=1), "toy")
    return SchedulingEnv(FixedEpisode(episode), window=8, max_nodes=4, **kwargs)


def rollout(env, rng, seed=0, policy="random"):
    obs, _ = env.reset(seed=seed)
    total, steps = 0.0, 0
    while True:
        mask = env.action_masks()
        assert np.array_equal(mask, obs["action_mask"].astype(bool))
        assert mask.any()
        if policy == "random":
            action = int(rng.choice(np.flatnonzero(mask)))
        else:
            action = int(np.flatnonzero(mask)[0])
        obs, reward, terminated, truncated, info = env.step(action)
        assert env.observation_space.contains(obs)
        total += reward
        steps += 1
        if terminated:
            return total, steps, info


def gym_checked(env) -> None:
    """Gymnasium's own checker (spaces, reset/step contracts, fresh observations)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check_env(env, skip_render_check=True)


def test_passes_the_gymnasium_checker():
    gym_checked(toy_env())


def test_random_masked_rollouts_finish_every_job_and_return_the_metrics():
    env = toy_env()
    total, steps, info = rollout(env, np.random.default_rng(0))
    records = env.sim.result().records
    assert len(records) == 30 and info["metrics"] == summarize(records, 16)
    assert steps >= 30  # at least one job step and one GPU step per job, minus none


@pytest.mark.parametrize("power", [2.0, 8.0])
def test_episode_return_is_the_weighted_metrics(power):
    """The reward terms telescope to the benchmark's metrics (see training/reward.py), with
    the fairness term's mean over users at any power."""
    w = RewardWeights(jct=1.0, fairness=3.0, comm=5.0, fairness_power=power)
    env = toy_env(reward=w)
    total, _, info = rollout(env, np.random.default_rng(1))
    m = info["metrics"]
    records = env.sim.result().records
    ideal_gpu_s = sum(r.ideal_duration * r.num_gpus for r in records)
    expected = -w.jct * m["lower_bound_ratio"] - w.fairness * user_wait_power_mean(records, w.fairness_power) - w.comm * m["comm_cost"] / ideal_gpu_s
    assert total == pytest.approx(expected, rel=1e-6, abs=1e-6)


def test_phases_alternate_and_wait_is_masked_on_an_idle_cluster():
    env = toy_env()
    obs, _ = env.reset(seed=0)
    assert obs["phase"] == 0 and not env.state.running
    assert not obs["action_mask"][env.wait_action]  # nothing runs: WAIT would stall
    slot = int(np.flatnonzero(obs["action_mask"])[0])
    obs, reward, *_ = env.step(slot)
    assert obs["phase"] == 1 and reward == 0.0
    assert obs["action_mask"][: len(env.placements)].all() and not obs["action_mask"][len(env.placements):].any()
    assert obs["node_valid"].sum() == 2 and obs["share"].sum() == pytest.approx(len(env.placements))
    obs, *_ = env.step(0)
    assert obs["phase"] == 0
    if env.state.running:
        assert obs["action_mask"][env.wait_action]


def test_a_masked_action_is_a_penalised_no_op():
    env = toy_env(invalid_penalty=0.5)
    obs, _ = env.reset(seed=0)
    before = env.state
    obs2, reward, terminated, _, info = env.step(env.wait_action)
    assert info["invalid"] and reward == -0.5 and not terminated and env.state is before
    assert np.array_equal(obs["jobs"], obs2["jobs"])


def test_same_seed_same_episode():
    trace = Trace("toy", "toy.csv", "generic", tuple(tj(i, i * 100.0, 300.0, gpus=1 + i % 4) for i in range(200)))
    env = SchedulingEnv(TraceWindows(trace, days=(0, 1), jobs=(20, 50), nodes=(1, 2)), window=8, max_nodes=2)
    a = rollout(env, np.random.default_rng(0), seed=11, policy="first")
    name = env.episode.name
    b = rollout(env, np.random.default_rng(0), seed=11, policy="first")
    assert a[:2] == b[:2] and env.episode.name == name


def test_trace_windows_fit_the_cluster_and_the_target_load():
    jobs = tuple(tj(i, i * 60.0, 600.0, gpus=[1, 2, 16, 64][i % 4]) for i in range(400))
    trace = Trace("toy", "toy.csv", "generic", jobs)
    rng = np.random.default_rng(0)
    sampler = TraceWindows(trace, days=(0, 1), jobs=(50, 100), nodes=(2,), load=(1.2, 1.2))
    ep = sampler(rng)
    assert all(s.job.num_gpus <= 16 for s in ep.jobs) and 50 <= len(ep.jobs) <= 100
    window = [s.job for s in ep.jobs]
    span = window[-1].submit_time - window[0].submit_time
    work = sum(j.num_gpus * min(j.duration, span) for j in window)
    assert work / (16 * span) == pytest.approx(1.2, rel=0.05)
    assert window[0].submit_time == 0.0
    assert [j.job_id for j in _at_load(window, 16, 2.0)] == [j.job_id for j in window]
    mixed = Mixture((sampler, FixedEpisode(ep)), (0.0, 1.0))
    assert mixed(rng) is ep


def test_too_many_nodes_for_the_padding_is_an_error():
    episode = Episode(tuple(toy_jobs(5)), uniform(8, 8), "big")
    with pytest.raises(ValueError, match="max_nodes=4"):
        SchedulingEnv(FixedEpisode(episode), window=8, max_nodes=4).reset(seed=0)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 10_000), st.integers(1, 3))
def test_any_masked_action_sequence_is_accepted_by_the_engine(seed, nodes):
    """The engine checks every start; a mask that allowed an infeasible job or GPU set
    would raise PolicyError here."""
    episode = Episode(tuple(toy_jobs(25, seed)), uniform(nodes, 8, nodes_per_switch=1), "prop")
    env = SchedulingEnv(FixedEpisode(episode), window=4, max_nodes=3)
    _, _, info = rollout(env, np.random.default_rng(seed), seed=seed)
    assert info["metrics"]["jobs"] == 25


def test_the_fairness_setting_scales_the_fairness_term_and_is_observed():
    w = RewardWeights(jct=1.0, fairness=3.0, comm=5.0)
    totals = {}
    for setting in (0.0, 0.4):
        env = toy_env(reward=w, fairness=setting)
        total, _, info = rollout(env, np.random.default_rng(1))
        records = env.sim.result().records
        m = info["metrics"]
        ideal_gpu_s = sum(r.ideal_duration * r.num_gpus for r in records)
        expected = (-w.jct * m["lower_bound_ratio"] - w.fairness * setting * user_wait_power_mean(records, w.fairness_power)
                    - w.comm * m["comm_cost"] / ideal_gpu_s)
        assert total == pytest.approx(expected, rel=1e-6, abs=1e-6)
        assert env.fairness == setting
        totals[setting] = total
    assert totals[0.4] < totals[0.0]  # somebody waited: the fairness term only ever costs


def test_a_fairness_range_is_drawn_per_episode_from_the_seed():
    env = toy_env(fairness=(0.2, 0.9))
    seen = []
    for seed in range(6):
        obs, _ = env.reset(seed=seed)
        assert 0.2 <= env.fairness <= 0.9 and obs["fairness"][0] == np.float32(env.fairness)
        seen.append(env.fairness)
    assert len(set(seen)) == 6
    assert [toy_env(fairness=(0.2, 0.9)).reset(seed=s)[0]["fairness"][0] for s in range(6)] == [np.float32(x) for x in seen]
    with pytest.raises(ValueError, match="fairness"):
        toy_env(fairness=(0.5, 1.5))


@pytest.mark.parametrize("power", [2.0, 8.0])
def test_the_fairness_potential_never_rewards_a_delay(power):
    """Holding back any one pending job can only lower the potential (the power mean of
    users' waits)."""
    from attentived.agents.state import ClusterState, PendingJob
    from attentived.training.reward import RewardTracker

    jobs = toy_jobs(6)
    tracker = RewardTracker(jobs, RewardWeights(fairness_power=power), fairness=1.0)
    topo = uniform(2, 8, nodes_per_switch=1)
    pending = [PendingJob(f"p{i}", f"u{i % 3}", 1, float(10 * i)) for i in range(6)]

    def potential(submits):
        state = ClusterState(now=500.0, topology=topo, free=np.ones(16, bool),
                             pending=tuple(PendingJob(j.job_id, j.user, 1, s) for j, s in zip(pending, submits)))
        tracker.reset()
        return tracker.advance(500.0, state).fairness  # from 0: the weighted potential itself

    base = [j.submit_time for j in pending]
    for i in range(6):
        earlier = list(base)
        earlier[i] -= 100.0  # job i has waited 100 s longer
        assert potential(earlier) < potential(base)


def test_wait_starts_what_cannot_delay_the_held_job_as_the_decision_loop_does():
    """WAIT in training does what it does when the agent runs (`agents.behind_wait`): the
    first job that cannot start is held, and jobs that fit packed beside it start now."""
    jobs = prepare_jobs([tj(0, 0.0, 3600.0, gpus=12), tj(1, 0.0, 3600.0, gpus=8, user="bob"),
                         tj(2, 0.0, 600.0, gpus=2, user="carol"), tj(3, 0.0, 600.0, gpus=1, user="dave")], 0)
    env = SchedulingEnv(FixedEpisode(Episode(tuple(jobs), uniform(2, 8, nodes_per_switch=1), "wait")), window=8,
                        max_nodes=4)
    env.reset(seed=0)
    slot = next(s for s, i in enumerate(env.job_view.index) if i >= 0 and env.state.pending[int(i)].job_id == "j0")
    env.step(slot)
    env.step(next(k for k, c in enumerate(env.placements) if "consolidate" in c.sources))
    assert env.phase == 0 and env.state.num_free == 4 and env.action_masks()[env.wait_action]
    _, _, done, _, info = env.step(env.wait_action)
    assert info["reward_terms"].comm <= 0.0
    while not done:  # finish the episode to read every job's start
        _, _, done, _, info = env.step(int(np.flatnonzero(env.action_masks())[0]))
    started = {r.job_id: r for r in env.sim.result().records}
    assert started["j2"].start_time == started["j3"].start_time == 0.0  # behind the WAIT, at once
    assert started["j1"].start_time > 0.0  # held for, not started behind the WAIT
    j0 = set(started["j0"].gpus)
    assert not j0 & set(started["j2"].gpus) and not j0 & set(started["j3"].gpus)


def test_under_the_packing_rule_every_start_is_packed_without_a_gpu_phase():
    """``pack=True``: a chosen job starts where `PackedPlacer` puts it (the model will run
    with ``pack=1``, whose rule replaces the GPU agent), so no GPU phase comes."""
    from attentived.agents.placement import packed

    env = toy_env(pack=True)
    rng = np.random.default_rng(4)
    env.reset(seed=0)
    done = False
    while not done:
        assert env.phase == 0
        _, _, done, _, _ = env.step(int(rng.choice(np.flatnonzero(env.action_masks()))))
    records = env.sim.result().records
    assert len(records) == 30
    assert all(packed(env.episode.topology, r.gpus) for r in records)


def packing_episode() -> Episode:
    """Two 6-GPU jobs fill one node each of 2 x 8 GPUs; a 4-GPU job then fits only spread
    (2 + 2), and a 1-GPU job of another user waits behind it."""
    jobs = prepare_jobs([tj(0, 0.0, 3600.0, gpus=6), tj(1, 0.0, 7200.0, gpus=6, user="bob"),
                         tj(2, 0.0, 600.0, gpus=4, user="carol"), tj(3, 1.0, 600.0, gpus=1, user="dave")], 0)
    return Episode(tuple(jobs), uniform(2, 8, nodes_per_switch=1), "pack")


def _slot(env, job_id):
    return next(s for s, i in enumerate(env.job_view.index) if i >= 0 and env.state.pending[int(i)].job_id == job_id)


def _choose(env, job_id):
    """Choose ``job_id``, and without the packing rule its consolidated placement."""
    env.step(_slot(env, job_id))
    if env.phase == 1:
        env.step(next(k for k, c in enumerate(env.placements) if "consolidate" in c.sources))


@pytest.mark.parametrize("pack", [False, True])
def test_choosing_a_job_that_cannot_pack_holds_it_under_the_packing_rule(pack):
    """Under the rule, choosing the 4-GPU job that fits only spread is holding it (as
    `pack=1` holds the first job of its order that cannot pack): it starts whole on the
    node the first 6-GPU job frees, and the 1-GPU job starts off its GPUs meanwhile.
    Without the rule the same choice starts it spread at once."""
    env = SchedulingEnv(FixedEpisode(packing_episode()), window=8, max_nodes=4, pack=pack)
    env.reset(seed=0)
    for job_id in ("j0", "j1", "j2"):
        assert env.state.num_free == 16 - 6 * int(job_id[1])
        _choose(env, job_id)
    done = False
    while not done:
        _, _, done, _, _ = env.step(int(np.flatnonzero(env.action_masks())[0]))
    runs = {r.job_id: r for r in env.sim.result().records}
    nodes = {g // 8 for g in runs["j2"].gpus}
    if pack:
        assert runs["j2"].start_time == pytest.approx(runs["j0"].end_time) and nodes == {g // 8 for g in runs["j0"].gpus}
        assert runs["j3"].start_time == pytest.approx(1.0) and not set(runs["j3"].gpus) & set(runs["j2"].gpus)
    else:
        assert runs["j2"].start_time == 0.0 and len(nodes) == 2


def test_the_packed_teachers_hold_is_the_label_under_the_packing_rule():
    """A teacher plan that starts nothing and holds a job that fits only spread labels that
    job under the rule (choosing it holds it there), WAIT without the rule."""
    from attentived.training.teacher import teacher_action

    labels = {}
    for pack in (False, True):
        env = SchedulingEnv(FixedEpisode(packing_episode()), window=8, max_nodes=4, pack=pack)
        env.reset(seed=0)
        for job_id in ("j0", "j1"):
            _choose(env, job_id)
        labels[pack] = (teacher_action(env, "look-ahead-packed"), _slot(env, "j2"), env.wait_action)
    assert labels[True][0] == labels[True][1]
    assert labels[False][0] == labels[False][2]


def test_under_the_packing_rule_a_job_starts_only_where_it_may():
    """The rule places a job among the GPUs Slurm would let it use (`Fit.usable`), as
    ``pack=1`` does: an exclusive job on the idle node, a job with ``-x node1`` off node1.
    On all free GPUs the simulator refused both starts and the episode died."""
    topo = uniform(2, 8, nodes_per_switch=1)
    jobs = prepare_jobs([tj(0, 0.0, 600.0, gpus=1), replace(tj(1, 0.0, 600.0, gpus=2, user="bob"), exclusive=True),
                         replace(tj(2, 0.0, 600.0, gpus=4, user="carol"), exclude=(topo.nodes[0].name,))], 0)
    env = SchedulingEnv(FixedEpisode(Episode(tuple(jobs), topo, "constrained")), window=8, max_nodes=4, pack=True)
    env.reset(seed=0)
    for job_id in ("j0", "j1"):
        env.step(_slot(env, job_id))
    done = False
    while not done:
        _, _, done, _, _ = env.step(int(np.flatnonzero(env.action_masks())[0]))
    runs = {r.job_id: r for r in env.sim.result().records}
    assert runs["j1"].start_time == 0.0 and {g // 8 for g in runs["j1"].gpus} == {1}  # node1 runs j0
    assert {g // 8 for g in runs["j2"].gpus} == {1} and runs["j2"].start_time == pytest.approx(runs["j1"].end_time)


def test_a_hold_after_the_instants_own_starts_is_the_one_pack1_makes():
    """``pack=1`` plans an instant at once: a job held after that plan's starts is held
    behind the jobs running before it (node A's, until 1,000 s), not behind the short job
    the plan just started on node B, so the long 4-GPU job starts beside that one now. The
    environment, starting one job per step, holds the same way and matches the replay."""
    from attentived.agents.registry import make_policy
    from attentived.simulator.engine import Simulation

    topo = uniform(2, 8, nodes_per_switch=1)
    jobs = [tj(0, 0.0, 1000.0, gpus=8), tj(1, 1.0, 100.0, gpus=4, user="bob"), tj(2, 1.0, 600.0, gpus=8, user="carol"),
            tj(3, 1.0, 5000.0, gpus=4, user="dave")]
    limits = {"j0": 1000.0, "j1": 100.0, "j2": 600.0, "j3": 5000.0}
    episode = Episode(tuple(replace(s, time_limit=limits[s.job.job_id]) for s in prepare_jobs(jobs, 0)), topo, "instant")
    env = SchedulingEnv(FixedEpisode(episode), window=8, max_nodes=4, pack=True)
    env.reset(seed=0)
    env.step(_slot(env, "j0"))
    assert env.state.now == 1.0 and env.state.num_free == 8
    env.step(_slot(env, "j1"))
    _, _, done, _, _ = env.step(env.wait_action)  # holds j2, which fits no node now
    while not done:
        _, _, done, _, _ = env.step(int(np.flatnonzero(env.action_masks())[0]))
    trained = {r.job_id: (r.start_time, r.gpus) for r in env.sim.result().records}
    replayed = Simulation(episode.jobs, topo, make_policy("fifo+consolidate+backfill:pack=1")).run().records
    assert trained == {r.job_id: (r.start_time, r.gpus) for r in replayed}
    assert trained["j3"][0] == 1.0 and trained["j2"][0] == pytest.approx(1000.0)
