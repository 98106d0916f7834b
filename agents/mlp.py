"""The DRL baselines' networks: plain MLPs over fixed-size, flattened observations.

They exist to measure what attention buys, so they see exactly the features the attentive
agents see (or, for the GPU-by-GPU baseline, the same facts per GPU) and differ only in
architecture: no attention, no weight sharing across jobs or GPUs, a fixed input size.

* `DeepRMNet` (after DeepRM, Mao et al., HotNets 2016): the queue as a fixed window of job
  slots, each slot's `JOB_FEATURES` concatenated with the cluster summary, through an MLP to
  one logit per slot plus WAIT. It only chooses jobs: in the GPU phase of
  `SchedulingEnv` it always takes the ``consolidate`` candidate (a heuristic placement), so
  those transitions carry no policy gradient and only train the critic.
* `ProximityNet` (after Proximity-DRL, Deng et al., Canadian AI 2024): chooses GPUs one at
  a time for a job a heuristic order picked. Input: every GPU's row of
  `attentived.agents.proximity.GPU_FEATURES` over a fixed ``max_gpus`` (padding marked
  invalid), plus the job and the next jobs of the queue; output: one logit per GPU slot.

Both follow CleanRL's ``ppo.py`` MLP agent: tanh layers, orthogonal initialization (gain
sqrt(2); 0.01 for the policy head so the first policy is near uniform; 1 for the value
head), and separate actor and critic trunks. Separate on purpose: with a shared trunk the
critic's gradients (returns of order 10) dominated the globally clipped gradient norm and
the actor barely moved (proximity-drl: KL 0.003 per update, teacher cross-entropy stuck at
0.9 over 300k steps), while the same network imitated the teacher to 0.04 by itself.
``forward(obs) -> (masked logits, value)`` is the same contract as `AttentiveNet`, so one
PPO loop trains all three.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from .features import (
    CANDIDATE_FEATURES,
    GENERATORS,
    JOB_FEATURES,
    SUMMARY_FEATURES,
    SUMMARY_TOKENS,
)
from .networks import masked
from .proximity import GLOBAL_FEATURES, GPU_FEATURES

_CONSOLIDATE = 10 + GENERATORS.index("consolidate")  # the candidate-feature column flagging consolidate's set


@dataclass(frozen=True)
class MlpConfig:
    """Hidden layer sizes of the baselines' trunks (CleanRL's MLP agent uses 64; the inputs
    here are 100x wider, hence 256)."""

    hidden: int = 256
    layers: int = 2

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def _layer(inp: int, out: int, gain: float = math.sqrt(2)) -> nn.Linear:
    layer = nn.Linear(inp, out)
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


def _trunk(inp: int, cfg: MlpConfig) -> nn.Sequential:
    mods: list[nn.Module] = []
    for i in range(cfg.layers):
        mods += [_layer(inp if i == 0 else cfg.hidden, cfg.hidden), nn.Tanh()]
    return nn.Sequential(*mods)


class DeepRMNet(nn.Module):
    """Job-slot MLP (see the module docstring). ``window`` is fixed at construction."""

    kind: ClassVar[str] = "deeprm"

    def __init__(self, window: int = 10, cfg: MlpConfig = MlpConfig()) -> None:
        super().__init__()
        self.window, self.cfg = window, cfg
        inp = window * (JOB_FEATURES + 1) + SUMMARY_TOKENS * SUMMARY_FEATURES
        self.actor = nn.Sequential(_trunk(inp, cfg), _layer(cfg.hidden, window + 1, 0.01))
        self.critic_trunk = _trunk(inp, cfg)
        self.value = _layer(cfg.hidden + 1 + window, 1, 1.0)

    @staticmethod
    def _input(jobs: Tensor, summary: Tensor, valid: Tensor) -> Tensor:
        valid = valid.float()
        return torch.cat([(jobs * valid.unsqueeze(-1)).flatten(1), valid, summary.flatten(1)], dim=1)

    def job_logits(self, jobs: Tensor, summary: Tensor, valid: Tensor) -> Tensor:
        """[B, W + 1] unmasked job logits: the slots, then WAIT."""
        return self.actor(self._input(jobs, summary, valid))

    def forward(self, obs: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        x = self._input(obs["jobs"], obs["summary"], obs["job_valid"])
        logits = self.actor(x)
        mask = obs["action_mask"].bool()
        B = mask.shape[0]
        phase = obs["phase"].float().view(B, 1)
        out = torch.zeros(mask.shape, dtype=logits.dtype, device=mask.device)
        out[:, : self.window + 1] = logits
        # GPU phase: the consolidate candidate only (a fixed, heuristic placement).
        consolidate = obs["candidates"][:, :, _CONSOLIDATE] > 0.5
        gpu = torch.zeros_like(out)
        gpu[:, : consolidate.shape[1]] = torch.where(consolidate, 0.0, -1e8)
        out = torch.where(phase > 0.5, gpu, out)
        chosen = nn.functional.one_hot(obs["job"].long().view(B), self.window).float() * phase
        value = self.value(torch.cat([self.critic_trunk(x), phase, chosen], dim=1)).squeeze(-1)
        return masked(out, mask), value

    def spec(self) -> dict[str, Any]:
        return {"window": self.window, **self.cfg.as_dict()}

    @classmethod
    def from_spec(cls, spec: dict[str, Any]) -> DeepRMNet:
        spec = dict(spec)
        return cls(int(spec.pop("window")), MlpConfig(**spec))

    @staticmethod
    def dims() -> dict[str, int]:
        return {"job_features": JOB_FEATURES, "summary_tokens": SUMMARY_TOKENS, "summary_features": SUMMARY_FEATURES,
                "candidate_features": CANDIDATE_FEATURES}


class ProximityNet(nn.Module):
    """GPU-by-GPU MLP (see the module docstring). ``max_gpus`` is fixed at construction:
    a cluster with more GPUs than that cannot be scheduled by this network."""

    kind: ClassVar[str] = "proximity-drl"

    def __init__(self, max_gpus: int = 128, cfg: MlpConfig = MlpConfig(), order: str = "fifo") -> None:
        super().__init__()
        self.max_gpus, self.cfg, self.order = max_gpus, cfg, order
        inp = max_gpus * GPU_FEATURES + GLOBAL_FEATURES
        self.actor = nn.Sequential(_trunk(inp, cfg), _layer(cfg.hidden, max_gpus, 0.01))
        self.critic = nn.Sequential(_trunk(inp, cfg), _layer(cfg.hidden, 1, 1.0))

    def forward(self, obs: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        x = torch.cat([obs["gpus"].flatten(1), obs["globals"]], dim=1)
        return masked(self.actor(x), obs["action_mask"].bool()), self.critic(x).squeeze(-1)

    def spec(self) -> dict[str, Any]:
        return {"max_gpus": self.max_gpus, "order": self.order, **self.cfg.as_dict()}

    @classmethod
    def from_spec(cls, spec: dict[str, Any]) -> ProximityNet:
        spec = dict(spec)
        return cls(int(spec.pop("max_gpus")), order=str(spec.pop("order")), cfg=MlpConfig(**spec))

    @staticmethod
    def dims() -> dict[str, int]:
        return {"gpu_features": GPU_FEATURES, "global_features": GLOBAL_FEATURES}
