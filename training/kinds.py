"""The trainable agents, and what the one PPO loop needs to know about each.

`attentived.training.ppo.train` is written once; an `AgentKind` supplies the three things
that differ between the attentive agents and the DRL baselines: the network, the
environment it acts in and the teacher's action there (for the teacher-guided start). The
`Policy` that runs a trained network is the decision core's (`agents.learned.POLICIES`).
Data, curriculum, reward, validation and checkpoints are the loop's, hence shared.

================  =========================  ===========================
agent             network                    environment
================  =========================  ===========================
attentive         `AttentiveNet` (attention  `SchedulingEnv`, window 64
                  over jobs, GPU agent)
deeprm            `DeepRMNet` (MLP over      `SchedulingEnv`, window 10
                  10 job slots)
proximity-drl     `ProximityNet` (MLP over   `GpuByGpuEnv` (FIFO order,
                  128 GPU slots)             one GPU per step)
================  =========================  ===========================
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from attentived.agents.checkpoint import Net
from attentived.agents.mlp import DeepRMNet, ProximityNet
from attentived.agents.networks import AttentiveNet

from .config import PPOConfig, Stage
from .gpu_env import GpuByGpuEnv
from .gym_env import EpisodeSampler, SchedulingEnv
from .teacher import job_teacher_action, teacher_action


@dataclass(frozen=True)
class AgentKind:
    """One trainable agent (see the module docstring); `KINDS` names them."""

    make_net: Callable[[PPOConfig], Net]
    make_env: Callable[[PPOConfig, EpisodeSampler], SchedulingEnv | GpuByGpuEnv]
    teacher: Callable[[Any, str], int]  # (environment, PPOConfig.teacher) -> the teacher's action
    defaults: Callable[[], dict[str, Any]] = dict
    """`PPOConfig` fields this agent trains with unless the run's settings say otherwise."""
    shares_queues: bool = False
    """Whether the network takes ``queue_of`` (`AttentiveNet.forward`): encodes a queue once
    for the job phase and the GPU phase that show it."""


def _two_phase_env(cfg: PPOConfig, episodes: EpisodeSampler) -> SchedulingEnv:
    return SchedulingEnv(episodes, window=cfg.window, max_nodes=cfg.max_nodes, max_candidates=cfg.max_candidates,
                         reward=cfg.reward, fairness=cfg.fairness_range or 1.0, urgency=cfg.urgency_input,
                         plan=cfg.plan_input, pack=cfg.pack)


def _gpu_env(cfg: PPOConfig, episodes: EpisodeSampler) -> GpuByGpuEnv:
    return GpuByGpuEnv(episodes, order=cfg.order, max_gpus=cfg.max_gpus, window=cfg.window, reward=cfg.reward)


def _gpu_teacher(env: Any, _teacher: str) -> int:
    return env.teacher_action()


def _proximity_defaults() -> dict[str, Any]:
    """Queue window 10 (the paper's); the attentive curriculum capped at 16 nodes x 8 GPUs,
    since the network reads 128 GPU slots."""
    curriculum = (
        Stage(0.0, nodes=(2, 4), jobs=(150, 400), load=(0.8, 1.4)),
        Stage(0.3, nodes=(4, 8), jobs=(300, 800), load=(0.8, 1.5)),
        Stage(0.6, nodes=(8, 16), jobs=(500, 1500), load=(0.9, 1.5)),
    )
    return {"window": 10, "out_dir": "runs/proximity-drl", "curriculum": curriculum}


def _attentive_net(cfg: PPOConfig) -> AttentiveNet:
    """A model trained over a range of W reads W (and, if asked, each job's urgency and the
    look-ahead's plan)."""
    conditioned = cfg.fairness_range is not None
    urgency = conditioned and cfg.urgency_input
    return AttentiveNet(replace(cfg.net, fairness_input=conditioned, urgency_input=urgency, slowdown_urgency=urgency,
                                plan_input=conditioned and cfg.plan_input,
                                plan_by_fairness=conditioned and cfg.plan_input and cfg.plan_by_fairness))


def _attentive_defaults() -> dict[str, Any]:
    """One network for every fairness setting that reads each job's urgency beside it, taught by
    the look-ahead at each episode's W."""
    return {"fairness_range": (0.0, 1.0), "teacher": "look-ahead", "urgency_input": True}


KINDS: dict[str, AgentKind] = {
    "attentive": AgentKind(_attentive_net, _two_phase_env, teacher_action, defaults=_attentive_defaults,
                           shares_queues=True),
    "deeprm": AgentKind(
        lambda cfg: DeepRMNet(cfg.window, cfg.mlp), _two_phase_env, job_teacher_action,
        defaults=lambda: {"window": 10, "out_dir": "runs/deeprm"},
    ),
    "proximity-drl": AgentKind(
        lambda cfg: ProximityNet(cfg.max_gpus, cfg.mlp, order=cfg.order), _gpu_env, _gpu_teacher,
        defaults=_proximity_defaults,
    ),
}


def kind_defaults(agent: str) -> dict[str, Any]:
    """`PPOConfig` overrides for training ``agent`` (``KeyError`` names the known agents)."""
    if agent not in KINDS:
        raise KeyError(f"unknown agent {agent!r}: one of {', '.join(KINDS)}")
    return {"agent": agent, **KINDS[agent].defaults()}
