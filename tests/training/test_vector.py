"""Environments stepped in worker processes give what stepping them here gives, and a
worker that fails or dies fails the call instead of hanging it."""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pytest
import torch

from attentived.agents.checkpoint import load_model
from attentived.simulator.trace import load_trace
from attentived.training.gym_env import Episode, TraceWindows
from attentived.training.ppo import train
from attentived.training.vector import VectorEnv, WorkerError

from .test_ppo import tiny_config


def _windows(cfg) -> TraceWindows:
    stage = cfg.curriculum[0]
    return TraceWindows(load_trace(cfg.train_trace), days=cfg.train_days, jobs=stage.jobs, nodes=stage.nodes,
                        load=stage.load)


def _rollout(envs: VectorEnv, steps: int) -> list:
    """Every array a rollout of the teacher's actions sees, step by step."""
    seen = []
    obs, teacher = envs.reset(list(range(10, 10 + envs.num_envs)))
    seen += [obs, teacher]
    for _ in range(steps):
        batch = envs.step(teacher)
        teacher = batch.teacher
        seen += [batch.obs, batch.teacher, batch.rewards, batch.dones,
                 [(i, info["metrics"]["avg_jct"]) for i, info in batch.ended]]
    return seen


def test_workers_step_the_environments_as_this_process_does(tmp_path):
    cfg = replace(tiny_config(tmp_path), num_envs=5)
    runs = []
    for workers in (0, 2):
        with VectorEnv(cfg, _windows(cfg), workers) as envs:
            runs.append(_rollout(envs, 120))
    ended = [e for step in runs[0][6::5] for e in step]
    assert len(ended) >= 5  # episodes ended and restarted along the way
    assert len(runs[0]) == len(runs[1])
    for a, b in zip(*runs):
        if isinstance(a, dict):
            assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
        else:
            assert np.array_equal(np.asarray(a), np.asarray(b))


def test_training_with_workers_gives_the_weights_training_here_gives(tmp_path):
    weights = []
    for workers in (0, 2):
        cfg = tiny_config(tmp_path / str(workers), env_workers=workers, val_every=10**6, checkpoint_every=10**6)
        train(cfg, progress=False)
        weights.append(load_model(Path(cfg.out_dir) / "final.pt").net.state_dict())
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])


@dataclass(frozen=True)
class _Broken:
    """Episodes that cannot be drawn (importable, so a spawned worker can unpickle it)."""

    def __call__(self, rng: np.random.Generator) -> Episode:
        raise ValueError("no episode here")


def test_a_worker_that_raises_fails_the_call_with_its_error(tmp_path):
    cfg = replace(tiny_config(tmp_path), num_envs=3)
    with VectorEnv(cfg, _Broken(), 2) as envs:
        with pytest.raises(WorkerError, match=r"environments 0-1\) failed: ValueError: no episode here") as error:
            envs.reset([1, 2, 3])
        assert any("the worker's traceback" in note for note in error.value.__notes__)


def _load_trace(path: str) -> _Broken:
    with open(path) as f:  # raises: the file is gone
        f.read()
    return _Broken()


class _LoadsInTheWorker:
    """Episodes that read their trace when the worker unpickles them, from a file that is
    gone: an ``OSError`` of the work, not of the pipe (a worker ended quietly on it)."""

    def __reduce__(self):
        return (_load_trace, ("/nowhere/trace.csv",))

    def __call__(self, rng: np.random.Generator) -> Episode:
        raise AssertionError("never drawn")


def test_a_worker_whose_work_raises_an_os_error_fails_with_it(tmp_path):
    cfg = replace(tiny_config(tmp_path), num_envs=2)
    with pytest.raises(WorkerError, match=r"failed: FileNotFoundError: .*/nowhere/trace.csv"):
        VectorEnv(cfg, _LoadsInTheWorker(), 2).close()


def test_a_worker_that_dies_fails_the_call_and_no_worker_is_left(tmp_path):
    cfg = replace(tiny_config(tmp_path), num_envs=4)
    envs = VectorEnv(cfg, _windows(cfg), 2)
    try:
        _, teacher = envs.reset([1, 2, 3, 4])
        victim = envs._workers[1].process
        os.kill(victim.pid, signal.SIGKILL)
        with pytest.raises(WorkerError, match=r"environments 2-3\) died \(killed by SIGKILL\)"):
            for _ in range(50):
                teacher = envs.step(teacher).teacher
    finally:
        envs.close()
    assert not envs._workers and not victim.is_alive()
