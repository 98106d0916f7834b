"""The attentive agents' networks: a job agent, a GPU agent and a shared critic head.

* `JobAgent`: a pre-norm Transformer encoder over ``[summary tokens, WAIT token, job
  tokens]``, then a pointer head (Bello et al., 2017): a query from the summary tokens
  against a key per token gives one logit per job slot and one for WAIT, clipped with
  ``10 * tanh`` so early training cannot saturate the softmax. Padding is masked in
  attention; infeasible jobs stay visible (they are what WAIT waits for) but are masked in
  the action distribution.
* `GpuAgent`: scores candidate placements. A candidate token is its own features (link
  class, slowdown, spread, what it fragments, when its neighbours free up) plus the
  share-weighted sum of the node tokens it lands on plus the chosen job's embedding; it
  then cross-attends over all node tokens (what is left elsewhere), and an MLP scores it.
* The critic is a head on the job agent's encoder: ``V(summary context, chosen job)``,
  the job embedding zero in the job phase. Sharing the encoder halves the CPU cost of a
  step and lets the value loss shape the same queue representation; it is a separate head,
  so the policy logits never mix with value estimates.

All modules are shape-agnostic (any window, node count or candidate count), so the model
trained on small clusters runs on a 128-node one; only the feature widths are fixed.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, ClassVar, NamedTuple

import torch
from torch import Tensor, nn

from .features import (
    CANDIDATE_FEATURES,
    JOB_FEATURES,
    NODE_FEATURES,
    SUMMARY_FEATURES,
    SUMMARY_TOKENS,
)

_MASKED = -1e8  # logit of an action the mask forbids (finite: entropy stays finite)


@dataclass(frozen=True)
class NetConfig:
    """Network sizes. Small on purpose: one decision must take milliseconds on one CPU core."""

    d_model: int = 64
    heads: int = 4
    layers: int = 2
    ff_mult: int = 2

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def _mlp(inp: int, d: int, out: int | None = None) -> nn.Sequential:
    return nn.Sequential(nn.Linear(inp, d), nn.ReLU(), nn.Linear(d, out or d))


class EncoderLayer(nn.Module):
    """Pre-norm self-attention block that can return its (head-averaged) attention weights."""

    def __init__(self, cfg: NetConfig) -> None:
        super().__init__()
        d = cfg.d_model
        self.norm1 = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, cfg.heads, batch_first=True)
        self.norm2 = nn.LayerNorm(d)
        self.ff = _mlp(d, cfg.ff_mult * d, d)

    def forward(self, x: Tensor, pad: Tensor, need_weights: bool = False) -> tuple[Tensor, Tensor | None]:
        h = self.norm1(x)
        a, w = self.attn(h, h, h, key_padding_mask=pad, need_weights=need_weights)
        x = x + a
        return x + self.ff(self.norm2(x)), w


class JobEncoding(NamedTuple):
    jobs: Tensor  # [B, W, d] job-token outputs
    context: Tensor  # [B, d] pooled summary tokens
    logits: Tensor  # [B, W + 1] job slots then WAIT, unmasked
    attention: Tensor | None  # [B, T, T] last layer, when asked for


class JobAgent(nn.Module):
    """Which job next, or WAIT. Tokens: ``SUMMARY_TOKENS`` summaries, WAIT, then the jobs."""

    def __init__(self, cfg: NetConfig) -> None:
        super().__init__()
        d = cfg.d_model
        self.job_in = _mlp(JOB_FEATURES, d)
        self.summary_in = nn.Linear(SUMMARY_FEATURES, d)
        self.summary_type = nn.Parameter(torch.randn(SUMMARY_TOKENS, d) * 0.02)
        self.wait_token = nn.Parameter(torch.randn(1, d) * 0.02)
        self.layers = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.layers))
        self.norm = nn.LayerNorm(d)
        self.query = nn.Linear(d, d)
        self.key = nn.Linear(d, d)
        self.scale = 1.0 / math.sqrt(d)

    def forward(self, jobs: Tensor, summary: Tensor, valid: Tensor, need_weights: bool = False) -> JobEncoding:
        B, W, _ = jobs.shape
        S = summary.shape[1]
        tokens = torch.cat(
            [self.summary_in(summary) + self.summary_type, self.wait_token.expand(B, 1, -1), self.job_in(jobs)], dim=1
        )
        pad = torch.cat([torch.zeros(B, S + 1, dtype=torch.bool, device=jobs.device), ~valid], dim=1)
        attention = None
        for i, layer in enumerate(self.layers):
            tokens, w = layer(tokens, pad, need_weights and i == len(self.layers) - 1)
            attention = w if w is not None else attention
        tokens = self.norm(tokens)
        context = tokens[:, :S].mean(dim=1)
        keys = self.key(torch.cat([tokens[:, S + 1 :], tokens[:, S : S + 1]], dim=1))  # jobs, then WAIT
        logits = 10.0 * torch.tanh(torch.einsum("bd,btd->bt", self.query(context), keys) * self.scale)
        return JobEncoding(tokens[:, S + 1 :], context, logits, attention)


class GpuAgent(nn.Module):
    """Which candidate placement for the chosen job."""

    def __init__(self, cfg: NetConfig) -> None:
        super().__init__()
        d = cfg.d_model
        self.node_in = _mlp(NODE_FEATURES, d)
        self.cand_in = _mlp(CANDIDATE_FEATURES, d)
        self.job_in = nn.Linear(d, d)
        self.cross = nn.MultiheadAttention(d, cfg.heads, batch_first=True)
        self.norm = nn.LayerNorm(d)
        self.score = _mlp(d, d, 1)

    def forward(
        self,
        job: Tensor,
        nodes: Tensor,
        node_valid: Tensor,
        cands: Tensor,
        share: Tensor,
        need_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """Logits [B, K] (unmasked) and, when asked, candidate-to-node attention [B, K, N]."""
        n = self.node_in(nodes)
        c = self.cand_in(cands) + torch.bmm(share, n) + self.job_in(job).unsqueeze(1)
        ctx, w = self.cross(c, n, n, key_padding_mask=~node_valid, need_weights=need_weights)
        return self.score(self.norm(c + ctx)).squeeze(-1), w


class AttentiveNet(nn.Module):
    """Both agents and the critic behind one ``forward(obs) -> (masked logits, value)``.

    ``obs`` is the environment's observation as tensors with a batch dimension (see
    `attentived.training.gym_env`): rows in the job phase (``phase == 0``) get job logits
    in slots ``0..W`` (W = WAIT); rows in the GPU phase get candidate logits in slots
    ``0..K-1``. Everything the mask forbids is ``-1e8``.
    """

    kind: ClassVar[str] = "attentive"

    def __init__(self, cfg: NetConfig = NetConfig()) -> None:
        super().__init__()
        self.cfg = cfg
        d = cfg.d_model
        self.job_agent = JobAgent(cfg)
        self.gpu_agent = GpuAgent(cfg)
        self.critic = nn.Sequential(nn.Linear(2 * d, d), nn.Tanh(), nn.Linear(d, 1))

    def forward(self, obs: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        enc = self.job_agent(obs["jobs"], obs["summary"], obs["job_valid"].bool())
        B = enc.logits.shape[0]
        mask = obs["action_mask"].bool()
        logits = torch.full(mask.shape, _MASKED, dtype=enc.logits.dtype, device=mask.device)
        phase = obs["phase"].long().view(B)
        job_phase = phase == 0
        logits[job_phase, : enc.logits.shape[1]] = enc.logits[job_phase]
        chosen = torch.zeros_like(enc.context)
        gpu_rows = torch.nonzero(~job_phase).view(-1)
        if len(gpu_rows):
            slot = obs["job"].long().view(B)[gpu_rows]
            chosen[gpu_rows] = enc.jobs[gpu_rows, slot]
            cand_logits, _ = self.gpu_agent(
                chosen[gpu_rows],
                obs["nodes"][gpu_rows],
                obs["node_valid"][gpu_rows].bool(),
                obs["candidates"][gpu_rows],
                obs["share"][gpu_rows],
            )
            logits[gpu_rows, : cand_logits.shape[1]] = cand_logits
        value = self.critic(torch.cat([enc.context, chosen], dim=-1)).squeeze(-1)
        return logits.masked_fill(~mask, _MASKED), value

    def spec(self) -> dict[str, Any]:
        """What rebuilds this network (saved in model files)."""
        return self.cfg.as_dict()

    @classmethod
    def from_spec(cls, spec: dict[str, Any]) -> AttentiveNet:
        return cls(NetConfig(**spec))

    @staticmethod
    def dims() -> dict[str, int]:
        """The feature widths the weights depend on (checked when a model is loaded)."""
        return {
            "job_features": JOB_FEATURES,
            "summary_tokens": SUMMARY_TOKENS,
            "summary_features": SUMMARY_FEATURES,
            "node_features": NODE_FEATURES,
            "candidate_features": CANDIDATE_FEATURES,
        }


def masked(logits: Tensor, mask: Tensor) -> Tensor:
    """``logits`` with forbidden actions at ``-1e8``."""
    return logits.masked_fill(~mask, _MASKED)
