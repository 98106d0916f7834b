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
    #: Whether the fairness setting W is an input (a preference-conditioned model: one
    #: network for every W). Model files from before it have no such key: no input.
    fairness_input: bool = False
    #: Whether the job agent reads each job's urgency (`features.job_urgency`, the log of
    #: the look-ahead's fairness weight) beside W, as a token input and as a pointer bias
    #: linear in ``urgency`` and ``W * urgency`` (the look-ahead's own Smith ratio, so
    #: the model can follow its teacher across W) that reorders the startable jobs and
    #: leaves the probability of WAIT as it was (`_reorder`).
    #: Needs ``fairness_input``.
    urgency_input: bool = False
    #: Whether that urgency weighs a user by the larger of their wait and slowdown ratios
    #: (`objective.fairness_weights`; models trained since 2026-12-02 afternoon) rather
    #: than by their wait ratio alone (model files without the key, the model shipped
    #: that morning among them): a model reads the urgency it was trained on.
    slowdown_urgency: bool = False
    #: Whether the job agent reads the look-ahead's plan at its W (`features.plan_marks`:
    #: the job the plan starts first, the others it starts now, or WAIT), as a token input
    #: and as a logit bias that starts at `PLAN_PRIOR`, so the network begins at its
    #: teacher's choice. Needs ``fairness_input`` (the plan is the look-ahead's at W).
    plan_input: bool = False
    #: Whether the plan's marks are scaled by W, in the token input and the bias alike: at
    #: W = 0 the network does not see the plan and decides alone (so PPO can find schedules
    #: faster than its teacher's, as students without the plan did), at W = 1 it reads the
    #: whole plan, the teacher's protective schedule it replays exactly. Needs
    #: ``plan_input``. Model files without the key: the same marks at every W. Measured
    #: (docs/agents.md, "A plan held by W"): free and faster at W = 0, `portfolio` from 0.25.
    plan_by_fairness: bool = False

    def __post_init__(self) -> None:
        if self.urgency_input and not self.fairness_input:
            raise ValueError("urgency_input needs fairness_input (the urgency is read beside W)")
        if self.plan_input and not self.fairness_input:
            raise ValueError("plan_input needs fairness_input (the plan is the look-ahead's at W)")
        if self.plan_by_fairness and not self.plan_input:
            raise ValueError("plan_by_fairness needs plan_input (it scales the plan's marks)")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


URGENCY_PRIOR = 4.0
"""The pointer bias's initial weight on ``W * u``. ``u`` is the log of the look-ahead's
fairness weight f over 4 (`features.job_urgency`), so the bias starts at ``W * log f``:
at W = 1 exactly the log of the urgency the look-ahead weighs a job's completion time by
(its Smith ratio orders by urgency / estimate), at W = 0 nothing."""


PLAN_PRIOR = 4.0
"""The initial weight of the plan's logit bias: a job marked first gains 4 nats over an
unmarked one, so an untrained network picks its teacher's job most of the time and PPO
starts from the teacher's schedule rather than reaching for it through the BC term."""


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
        # W enters where the queue is summarised, so every token can attend to it and the
        # pointer's query (pooled from the summary tokens) carries it.
        self.fairness_in = nn.Linear(1, d) if cfg.fairness_input else None
        # Each job's urgency u and W * u: into its token, and straight into its logit. The
        # bias starts as the look-ahead's own weighting (`URGENCY_PRIOR`), not at 0: two
        # scalars under Adam at 3e-4 move about 0.01 per update, so a bias started at 0 was
        # still near 0 after the first 45 updates, and the knob had to come from the tokens.
        self.urgency_in = nn.Linear(2, d) if cfg.urgency_input else None
        self.urgency_bias = nn.Parameter(torch.tensor([0.0, URGENCY_PRIOR])) if cfg.urgency_input else None
        self.plan_in = nn.Linear(1, d) if cfg.plan_input else None
        self.plan_bias = nn.Parameter(torch.tensor(PLAN_PRIOR)) if cfg.plan_input else None
        self.plan_by_fairness = cfg.plan_by_fairness
        self.layers = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.layers))
        self.norm = nn.LayerNorm(d)
        self.query = nn.Linear(d, d)
        self.key = nn.Linear(d, d)
        self.scale = 1.0 / math.sqrt(d)

    def forward(self, jobs: Tensor, summary: Tensor, valid: Tensor, need_weights: bool = False,
                fairness: Tensor | None = None, urgency: Tensor | None = None,
                feasible: Tensor | None = None, plan: Tensor | None = None) -> JobEncoding:
        """``fairness``: W per row, [B, 1]; ``urgency``: per job slot, [B, W]; ``plan``:
        per job slot then WAIT, [B, W + 1]; each required exactly when the network takes
        it. ``feasible`` ([B, W] bool, the jobs that can start now) is required with
        ``urgency``: the bias reorders those."""
        B, W, _ = jobs.shape
        S = summary.shape[1]
        summaries = self.summary_in(summary) + self.summary_type
        job_tokens = self.job_in(jobs)
        bias = None
        if self.fairness_in is not None:
            if fairness is None:
                raise ValueError("this network takes the fairness setting W as an input")
            w = fairness.view(B, 1).to(summaries.dtype)
            summaries = summaries + self.fairness_in(w).unsqueeze(1)
            if self.urgency_in is not None and self.urgency_bias is not None:
                if urgency is None:
                    raise ValueError("this network takes each job's urgency as an input")
                u = urgency.view(B, W).to(summaries.dtype)
                pair = torch.stack([u, w * u], dim=-1)  # [B, W, 2]
                job_tokens = job_tokens + self.urgency_in(pair)
                bias = pair @ self.urgency_bias  # [B, W]
        wait_token = self.wait_token.expand(B, 1, -1)
        if self.plan_in is not None:
            if plan is None:
                raise ValueError("this network takes the look-ahead's plan as an input")
            plan = plan.to(summaries.dtype)
            if self.plan_by_fairness and fairness is not None:
                plan = plan * fairness.view(B, 1).to(summaries.dtype)
            marked = self.plan_in(plan.unsqueeze(-1))  # [B, W + 1, d]
            job_tokens, wait_token = job_tokens + marked[:, :W], wait_token + marked[:, W:]
        tokens = torch.cat([summaries, wait_token, job_tokens], dim=1)
        pad = torch.cat([torch.zeros(B, S + 1, dtype=torch.bool, device=jobs.device), ~valid], dim=1)
        attention = None
        for i, layer in enumerate(self.layers):
            tokens, w = layer(tokens, pad, need_weights and i == len(self.layers) - 1)
            attention = w if w is not None else attention
        tokens = self.norm(tokens)
        context = tokens[:, :S].mean(dim=1)
        keys = self.key(torch.cat([tokens[:, S + 1 :], tokens[:, S : S + 1]], dim=1))  # jobs, then WAIT
        logits = 10.0 * torch.tanh(torch.einsum("bd,btd->bt", self.query(context), keys) * self.scale)
        if bias is not None:
            if feasible is None:
                raise ValueError("the urgency bias needs the jobs that can start (feasible)")
            logits = torch.cat([_reorder(logits[:, :W], bias, feasible & valid), logits[:, W:]], dim=1)
        if plan is not None and self.plan_bias is not None:
            logits = logits + self.plan_bias * plan
        return JobEncoding(tokens[:, S + 1 :], context, logits, attention)


def _reorder(logits: Tensor, bias: Tensor, feasible: Tensor) -> Tensor:
    """Job logits [B, W] with ``bias`` added and shifted per row so that the feasible jobs'
    log-sum-exp is unchanged: the bias decides *which* job starts, never *whether* one does.

    Why: P(WAIT) = e^wait / (e^wait + sum of e^logit over the feasible jobs), so keeping
    that sum keeps P(WAIT) exactly as the unbiased pointer has it. The first urgency models
    added the bias to the jobs alone, and at W >= 0.75 a queue whose startable jobs all
    belonged to well-served users fell below WAIT while their GPUs sat free; moving WAIT with
    the largest bias instead let one urgent job that could not start lift WAIT above every
    job that could. Rows with no feasible job are left unshifted (only WAIT is legal)."""
    biased = logits + bias
    none = ~feasible.any(dim=1, keepdim=True)
    shift = (torch.logsumexp(logits.masked_fill(~feasible, -torch.inf), dim=1, keepdim=True)
             - torch.logsumexp(biased.masked_fill(~feasible, -torch.inf), dim=1, keepdim=True))
    return biased + torch.where(none, torch.zeros_like(shift), shift)


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

    def forward(self, obs: dict[str, Tensor], queue_of: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """``queue_of`` ([B] long), when given, says which rows show the same queue: row
        ``i`` reuses the job agent's encoding of row ``queue_of[i]``, which must show the
        same ``jobs``, ``summary``, ``job_valid``, ``fairness`` and ``urgency``, be in the job
        phase and encode itself (``queue_of[j] == j``); at most one row may reuse a row.

        Why: a GPU phase shows the queue of the job phase just before it, so in a PPO
        minibatch that keeps the two together the job agent -- nearly all of the cost --
        runs once for both. Values and gradients are those of encoding every row (the
        encoder is deterministic); only float rounding differs."""
        mask = obs["action_mask"].bool()
        B, W = obs["job_valid"].shape
        phase = obs["phase"].long().view(B)
        job_phase, gpu_rows = phase == 0, torch.nonzero(phase != 0).view(-1)
        slot = torch.where(job_phase, 0, obs["job"].long().view(B))  # the job phase has chosen no job yet
        fairness = obs.get("fairness") if self.cfg.fairness_input else None
        urgency = obs.get("urgency") if self.cfg.urgency_input else None
        plan = obs.get("plan") if self.cfg.plan_input else None
        if queue_of is None:
            context, job_logits, job_token = self._encode_queues(obs["jobs"], obs["summary"], obs["job_valid"].bool(),
                                                                 slot, fairness, urgency, mask[:, :W], plan)
        else:
            own = torch.nonzero(queue_of == torch.arange(B, device=queue_of.device)).view(-1)
            position = torch.empty_like(queue_of)
            position[own] = torch.arange(len(own), device=own.device)
            at = position[queue_of]  # row -> the encoded row it reads, in ``own``
            # the slot whose token each encoded row hands out: its own, or its reader's (the
            # job phase's own slot is 0, and a row that is read is in the job phase)
            own_slot = torch.zeros_like(own).index_put((at,), slot, accumulate=True)
            context, job_logits, job_token = self._encode_queues(
                obs["jobs"][own], obs["summary"][own], obs["job_valid"][own].bool(), own_slot,
                None if fairness is None else fairness[own], None if urgency is None else urgency[own], mask[own, :W],
                None if plan is None else plan[own])
            context, job_logits, job_token = context[at], job_logits[at], job_token[at]
        logits = torch.full(mask.shape, _MASKED, dtype=job_logits.dtype, device=mask.device)
        logits[job_phase, : W + 1] = job_logits[job_phase]
        chosen = torch.where(job_phase.unsqueeze(1), 0.0, job_token)  # the critic sees no job in the job phase
        if len(gpu_rows):
            node_valid = obs["node_valid"][gpu_rows].bool()
            n = _used_width(node_valid)  # padded nodes hold no share of any candidate
            cand_logits, _ = self.gpu_agent(
                chosen[gpu_rows],
                obs["nodes"][gpu_rows, :n],
                node_valid[:, :n],
                obs["candidates"][gpu_rows],
                obs["share"][gpu_rows, :, :n],
            )
            logits[gpu_rows, : cand_logits.shape[1]] = cand_logits
        value = self.critic(torch.cat([context, chosen], dim=-1)).squeeze(-1)
        return logits.masked_fill(~mask, _MASKED), value

    def _encode_queues(self, jobs: Tensor, summary: Tensor, valid: Tensor, slot: Tensor,
                       fairness: Tensor | None, urgency: Tensor | None,
                       feasible: Tensor, plan: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """The job agent over a batch of queues, cut to the slots in use: the pooled context
        [B, d], the logits [B, W + 1] (slots, then WAIT; slots cut off at ``-1e8``) and the
        job token at ``slot`` [B, d], rows in the input order. ``feasible`` is the job
        phase's action mask over the slots (other rows' logits are not used).

        Why: observations are padded to the whole window, but most queues use a few slots,
        and the encoder's cost grows with the padded length (in attention quadratically):
        cutting made a PPO minibatch 3-9x cheaper. Rows are grouped by their used width
        rounded up to a power of two, each group cut to its widest row (at most twice a
        row's width); a group too small to pay for an encoder call of its own joins the
        next wider one (`_groups`). The cut is exact up to float rounding: padded slots
        are never attended to, never chosen and always masked in the action distribution,
        so they only ever added masked work."""
        B, W = valid.shape
        groups = _groups(_used_widths(valid))
        contexts, logits, tokens = [], [], []
        for rows, w in groups:
            enc = self.job_agent(jobs[rows, :w], summary[rows], valid[rows, :w],
                                 fairness=None if fairness is None else fairness[rows],
                                 urgency=None if urgency is None else urgency[rows, :w],
                                 feasible=feasible[rows, :w],
                                 plan=None if plan is None else torch.cat([plan[rows, :w], plan[rows, -1:]], dim=1))
            cut = enc.logits.new_full((len(rows), W - w), _MASKED)
            contexts.append(enc.context)
            logits.append(torch.cat([enc.logits[:, :w], cut, enc.logits[:, w:]], dim=1))
            tokens.append(enc.jobs[torch.arange(len(rows), device=jobs.device), slot[rows]])
        if len(groups) == 1:
            return contexts[0], logits[0], tokens[0]
        back = torch.argsort(torch.cat([rows for rows, _ in groups]))  # grouped order -> input order
        return torch.cat(contexts)[back], torch.cat(logits)[back], torch.cat(tokens)[back]

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


_CALL_COST = 64
"""What one more encoder call costs, in units of one token of one row (measured on one CPU
core: a call's fixed cost is that of about 64 token rows, with or without gradients)."""


def _groups(used: Tensor) -> list[tuple[Tensor, int]]:
    """Rows of a batch grouped for the encoder, each group with its width: by ``used``
    rounded up to a power of two, narrowest first; a group whose rows would cost less
    padded to the next group's width than a call of their own joins that group."""
    rounded = torch.ceil(torch.log2(used.clamp(min=1).float())).long()
    classes = [torch.nonzero(rounded == r).view(-1) for r in torch.unique(rounded)]
    widths = [max(int(used[rows].max()), 1) for rows in classes]
    groups: list[tuple[Tensor, int]] = []
    carried = used.new_zeros(0)
    for i, (rows, w) in enumerate(zip(classes, widths)):
        rows = torch.cat([carried, rows])
        if i + 1 < len(classes) and len(rows) * (widths[i + 1] - w) < _CALL_COST:
            carried = rows
        else:
            groups.append((torch.sort(rows).values, w))  # one group: the batch in its order
            carried = used.new_zeros(0)
    return groups


def _used_widths(valid: Tensor) -> Tensor:
    """Per row of a [B, L] validity mask: one past its last valid position (0 if none)."""
    positions = torch.arange(1, valid.shape[1] + 1, device=valid.device)
    return (valid * positions).amax(1)


def _used_width(valid: Tensor) -> int:
    """The positions of a [B, L] validity mask that some row uses (at least one)."""
    return max(int(_used_widths(valid).max()), 1)


def masked(logits: Tensor, mask: Tensor) -> Tensor:
    """``logits`` with forbidden actions at ``-1e8``."""
    return logits.masked_fill(~mask, _MASKED)
