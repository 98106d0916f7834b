"""The GPU-by-GPU environment of the Proximity-DRL-style baseline."""

from __future__ import annotations

import numpy as np
import pytest

from attentived.agents.order import Fifo
from attentived.agents.placement import Consolidate
from attentived.agents.policy import Scheduler
from attentived.simulator.engine import Simulation
from attentived.simulator.metrics import summarize
from attentived.topology import uniform
from attentived.training.gpu_env import GpuByGpuEnv
from attentived.training.gym_env import Episode, FixedEpisode
from attentived.training.reward import RewardWeights, user_wait_power_mean

from .test_gym_env import gym_checked, toy_jobs


def toy_env(n=30, nodes=2, max_gpus=32, **kwargs) -> GpuByGpuEnv:
    episode = Episode(tuple(toy_jobs(n)), uniform(nodes, 8, nodes_per_switch=1), "toy")
    return GpuByGpuEnv(FixedEpisode(episode), max_gpus=max_gpus, **kwargs)


def rollout(env, choose, seed=0):
    obs, _ = env.reset(seed=seed)
    total, steps = 0.0, 0
    while True:
        mask = env.action_masks()
        assert mask.any() and np.array_equal(mask, obs["action_mask"].astype(bool))
        obs, reward, terminated, truncated, info = env.step(choose(env, mask))
        assert env.observation_space.contains(obs) and not truncated and not info.get("invalid")
        total, steps = total + reward, steps + 1
        if terminated:
            return total, steps, info


def test_passes_the_gymnasium_checker():
    gym_checked(toy_env())


def test_teacher_reproduces_fifo_with_consolidate_exactly():
    """One GPU per step, teacher actions: the same schedule as the heuristic pair, record for
    record, so the environment decides exactly what `Scheduler(Fifo(), placer)` decides."""
    env = toy_env(n=40)
    _, steps, info = rollout(env, lambda e, m: e.teacher_action())
    ep = env.episode
    expected = Simulation(ep.jobs, ep.topology, Scheduler(Fifo(), Consolidate())).run().records
    assert env.sim.result().records == expected
    assert steps == sum(s.job.num_gpus for s in ep.jobs)  # one step per GPU
    assert info["metrics"] == summarize(expected, ep.topology.num_gpus)


def test_random_masked_rollouts_finish_every_job_and_the_return_is_the_weighted_metrics():
    w = RewardWeights(jct=1.0, fairness=3.0, comm=5.0)
    env = toy_env(reward=w)
    rng = np.random.default_rng(0)
    total, _, info = rollout(env, lambda e, m: int(rng.choice(np.flatnonzero(m))))
    records = env.sim.result().records
    m = info["metrics"]
    assert len(records) == 30
    ideal_gpu_s = sum(r.ideal_duration * r.num_gpus for r in records)
    expected = -w.jct * m["lower_bound_ratio"] - w.fairness * user_wait_power_mean(records, w.fairness_power) - w.comm * m["comm_cost"] / ideal_gpu_s
    assert total == pytest.approx(expected, rel=1e-6, abs=1e-6)


def test_a_masked_action_is_a_penalised_no_op():
    env = toy_env(invalid_penalty=0.5)
    obs, _ = env.reset(seed=0)
    taken = int(np.flatnonzero(~obs["action_mask"].astype(bool))[0])  # padding beyond 16 GPUs
    obs2, reward, terminated, _, info = env.step(taken)
    assert info["invalid"] and reward == -0.5 and not terminated
    assert np.array_equal(obs["gpus"], obs2["gpus"])


def test_a_cluster_larger_than_the_input_is_refused():
    with pytest.raises(ValueError, match="max_gpus=8"):
        toy_env(max_gpus=8).reset(seed=0)
