"""``gymnasium.make("attentived/Scheduling-v0")``: registered on import, kwargs reach the
environment, both phases step under the masks, a seed replays an episode, no checker warns."""

from __future__ import annotations

import subprocess
import sys
import warnings

import gymnasium
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from attentived.simulator.trace import Trace
from attentived.training import ENV_ID
from attentived.training.gym_env import SchedulingEnv, TraceWindows
from tests.training.test_gym_env import tj

#: 200 jobs over a day, 1 to 4 GPUs each: windows of 20-40 jobs on 1-2 nodes, fast episodes.
TRACE_WINDOWS = TraceWindows(
    Trace("toy", "toy.csv", "generic", tuple(tj(i, i * 100.0, 300.0 + 37 * (i % 7), gpus=1 + i % 4) for i in range(200))),
    days=(0, 1), jobs=(20, 40), nodes=(1, 2),
)


def make(**kwargs):
    """The env by id, with any warning (the passive checker's included) an error."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return gymnasium.make(ENV_ID, **{"episodes": TRACE_WINDOWS, "window": 8, "max_nodes": 2, **kwargs})


def episode(env, seed: int, action_seed: int) -> list:
    """One episode under masked random actions: every step's phase, action, reward,
    observation and info, checked against the env's own view as it goes."""
    rng = np.random.default_rng(action_seed)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        obs, info = env.reset(seed=seed)
        steps: list = [(info["episode_name"],)]
        while True:
            phase = env.unwrapped.phase
            assert obs["phase"] == phase and np.array_equal(obs["action_mask"].astype(bool), env.unwrapped.action_masks())
            action = int(rng.choice(np.flatnonzero(obs["action_mask"])))
            obs, reward, terminated, truncated, info = env.step(action)
            assert not truncated and env.observation_space.contains(obs)
            steps.append((phase, action, reward, {k: v.tolist() if isinstance(v, np.ndarray) else v for k, v in obs.items()},
                          info.get("metrics")))
            if terminated:
                return steps


def test_registered_on_import_and_kwargs_reach_the_env():
    assert ENV_ID in gymnasium.registry
    env = make(window=6, invalid_penalty=0.25)
    inner = env.unwrapped
    assert isinstance(inner, SchedulingEnv) and env.spec is not None and env.spec.id == ENV_ID
    assert (inner.window, inner.max_nodes, inner.invalid_penalty, inner.episodes) == (6, 2, 0.25, TRACE_WINDOWS)
    assert env.action_space.n == max(6 + 1, inner.max_candidates)


def test_both_phases_step_under_the_masks_to_the_end():
    steps = episode(make(), seed=3, action_seed=0)
    phases = [s[0] for s in steps[1:]]
    assert phases[0] == 0 and 1 in phases
    for (phase, action, *_), (next_phase, *_) in zip(steps[1:], steps[2:]):
        if phase == 1:  # a start: the next decision is a job phase
            assert next_phase == 0
        elif action < 8:  # a job slot opens its GPU phase
            assert next_phase == 1
    metrics = steps[-1][-1]
    assert metrics is not None and 20 <= metrics["jobs"] <= 40


def test_a_seed_replays_the_episode_and_another_seed_does_not():
    a = episode(make(), seed=7, action_seed=1)
    b = episode(make(), seed=7, action_seed=1)
    assert a == b
    c = episode(make(), seed=8, action_seed=1)
    assert c[0] != a[0]  # another window of the trace


def test_phase_is_read_only():
    env = make().unwrapped
    env.reset(seed=0)
    with pytest.raises(AttributeError):
        env.phase = 1


def test_the_gymnasium_checker_is_silent():
    env = make().unwrapped
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(env, skip_render_check=True)


def test_the_default_workload_is_philly_windows():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        env = gymnasium.make(ENV_ID, max_nodes=4)
        _, info = env.reset(seed=0)
    assert info["episode_name"].startswith("philly")


def test_a_fresh_interpreter_makes_it_by_module_and_id():
    """What a user without ``import attentived.training`` writes: Gymnasium imports the module."""
    code = ("import gymnasium; env = gymnasium.make('attentived.training:attentived/Scheduling-v0', max_nodes=4); "
            "obs, _ = env.reset(seed=0); print(obs['phase'], env.unwrapped.phase)")
    out = subprocess.run([sys.executable, "-W", "error", "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["0", "0"]
