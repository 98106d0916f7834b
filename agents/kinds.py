"""The trainable agents, and what the one PPO loop needs to know about each.

`attentived.agents.ppo.train` is written once; an `AgentKind` supplies the four things that
differ between the attentive agents and the DRL baselines: the network, the environment it
acts in, the teacher's action there (for the teacher-guided start), and the `Policy` that
runs the trained network in the simulator and the daemon. Data, curriculum, reward,
validation and checkpoints are the loop's, hence shared.

================  =========================  ===========================  ==========================
agent             network                    environment                  policy
================  =========================  ===========================  ==========================
attentive         `AttentiveNet` (attention  `SchedulingEnv`, window 64   `AttentivePolicy`
                  over jobs, GPU agent)
deeprm            `DeepRMNet` (MLP over      `SchedulingEnv`, window 10   `DeepRMPolicy` (job MLP,
                  10 job slots)                                           consolidate placement)
proximity-drl     `ProximityNet` (MLP over   `GpuByGpuEnv` (FIFO order,   `Scheduler(fifo,
                  128 GPU slots)             one GPU per step)            ProximityPlacer)`
================  =========================  ===========================  ==========================
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from torch import nn

from .checkpoint import CheckpointError, LoadedModel, load_model
from .policy import Policy

if TYPE_CHECKING:
    import gymnasium as gym

    from attentived.simulator.gym_env import EpisodeSampler

    from .ppo import PPOConfig


@dataclass(frozen=True)
class AgentKind:
    """One trainable agent (see the module docstring); `KINDS` names them."""

    make_net: Callable[[PPOConfig], nn.Module]
    make_env: Callable[[PPOConfig, EpisodeSampler], gym.Env]
    teacher: Callable[[Any], int]
    make_policy: Callable[[LoadedModel, int, int | None], Policy]
    defaults: Callable[[], dict[str, Any]] = dict
    """`PPOConfig` fields this agent trains with unless the run's settings say otherwise."""


# ---- attentive ----


def _attentive_net(cfg: PPOConfig) -> nn.Module:
    from .networks import AttentiveNet

    return AttentiveNet(cfg.net)


def _two_phase_env(cfg: PPOConfig, episodes: EpisodeSampler) -> gym.Env:
    from attentived.simulator.gym_env import SchedulingEnv

    return SchedulingEnv(episodes, window=cfg.window, max_nodes=cfg.max_nodes, max_candidates=cfg.max_candidates,
                         reward=cfg.reward)


def _attentive_policy(model: LoadedModel, seed: int, threads: int | None) -> Policy:
    from .attentive import AttentivePolicy

    return AttentivePolicy(model.net, window=model.window, max_candidates=model.max_candidates, seed=seed, threads=threads)


def _teacher(env: Any) -> int:
    from .teacher import teacher_action

    return teacher_action(env)


# ---- deeprm ----


def _deeprm_net(cfg: PPOConfig) -> nn.Module:
    from .mlp import DeepRMNet

    return DeepRMNet(cfg.window, cfg.mlp)


def _deeprm_policy(model: LoadedModel, seed: int, threads: int | None) -> Policy:
    from .deeprm import DeepRMPolicy

    return DeepRMPolicy(model.net, seed=seed, threads=threads)


def _job_teacher(env: Any) -> int:
    from .teacher import job_teacher_action

    return job_teacher_action(env)


# ---- proximity-drl ----


def _proximity_net(cfg: PPOConfig) -> nn.Module:
    from .mlp import ProximityNet

    return ProximityNet(cfg.max_gpus, cfg.mlp, order=cfg.order)


def _gpu_env(cfg: PPOConfig, episodes: EpisodeSampler) -> gym.Env:
    from attentived.simulator.gpu_env import GpuByGpuEnv

    return GpuByGpuEnv(episodes, order=cfg.order, max_gpus=cfg.max_gpus, window=cfg.window, reward=cfg.reward)


def _proximity_policy(model: LoadedModel, seed: int, threads: int | None) -> Policy:
    import torch

    from .policy import Scheduler
    from .proximity import ProximityPlacer
    from .registry import ORDERS

    if threads is not None:
        torch.set_num_threads(threads)
    net = model.net
    return Scheduler(ORDERS[net.order](seed), ProximityPlacer(net, seed=seed), backfill=False, name="proximity-drl")


def _gpu_teacher(env: Any) -> int:
    return env.teacher_action()


def _proximity_defaults() -> dict[str, Any]:
    """Queue window 10 (the paper's); the attentive curriculum capped at 16 nodes x 8 GPUs,
    since the network reads 128 GPU slots."""
    from .ppo import Stage

    curriculum = (
        Stage(0.0, nodes=(2, 4), jobs=(150, 400), load=(0.8, 1.4)),
        Stage(0.3, nodes=(4, 8), jobs=(300, 800), load=(0.8, 1.5)),
        Stage(0.6, nodes=(8, 16), jobs=(500, 1500), load=(0.9, 1.5)),
    )
    return {"window": 10, "out_dir": "runs/proximity-drl", "curriculum": curriculum}


KINDS: dict[str, AgentKind] = {
    "attentive": AgentKind(
        _attentive_net, _two_phase_env, _teacher, _attentive_policy,
    ),
    "deeprm": AgentKind(
        _deeprm_net, _two_phase_env, _job_teacher, _deeprm_policy,
        defaults=lambda: {"window": 10, "out_dir": "runs/deeprm"},
    ),
    "proximity-drl": AgentKind(
        _proximity_net, _gpu_env, _gpu_teacher, _proximity_policy,
        defaults=_proximity_defaults,
    ),
}


def kind_defaults(agent: str) -> dict[str, Any]:
    """`PPOConfig` overrides for training ``agent`` (``KeyError`` names the known agents)."""
    if agent not in KINDS:
        raise KeyError(f"unknown agent {agent!r}: one of {', '.join(KINDS)}")
    return {"agent": agent, **KINDS[agent].defaults()}


def default_model_path(agent: str) -> Path:
    """The model shipped for ``agent`` (``attentived/data/models/<agent>-default.pt``)."""
    return Path(str(files("attentived.data") / "models" / f"{agent}-default.pt"))


def load_learned(agent: str | None, path: str | os.PathLike[str] | None = None, seed: int = 0,
                 threads: int | None = 1) -> Policy:
    """The policy of a trained model: the file at ``path`` (default: ``agent``'s shipped
    model). With ``agent`` named, a model of another agent is refused (`CheckpointError`),
    so ``--policy deeprm --model attentive.pt`` fails instead of mis-loading."""
    if path is None:
        if agent is None:
            raise ValueError("name an agent or a model file")
        path = default_model_path(agent)
    model = load_model(path)
    if agent is not None and model.agent != agent:
        raise CheckpointError(f"{path}: a model of the {model.agent} agent, not {agent}; run it as --policy {model.agent}")
    return KINDS[model.agent].make_policy(model, seed, threads)
