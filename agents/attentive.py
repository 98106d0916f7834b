"""The ``attentive`` policy: the trained job and GPU agents behind `Policy.decide`.

At each decision point the job agent picks a job that can start (or WAIT) and the GPU
agent picks one of that job's candidate placements; `TwoPhasePolicy` repeats that on a copy
of the state until WAIT or until nothing more fits, ranks the rest and holds GPUs for the
first blocked job. `AttentivePolicy.explain` shows the probabilities, the chosen job's
attention to the other jobs and its GPU set against the alternatives.

Evaluation is deterministic (argmax in both agents); ``deterministic=False`` samples
from a seeded generator instead.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from .features import Candidate, Context, GpuView, JobView
from .guided import look_ahead_teacher
from .networks import AttentiveNet, JobEncoding, masked
from .objective import DEFAULT_FAIRNESS, check_fairness
from .order import estimated_runtime
from .state import ClusterState, PendingJob
from .two_phase import TwoPhasePolicy


@dataclass(frozen=True)
class JobOption:
    """A job the agent could pick (``job_id`` ``None`` is WAIT) and its probability."""

    job_id: str | None
    probability: float


@dataclass(frozen=True)
class PlacementOption:
    """A candidate GPU set for the explained job.

    ``slowdown`` is the speed model's run time on these GPUs over the ideal placement (for
    the job's declared model); ``extra_gpu_seconds`` is what that costs over the job's
    estimated run time (``None`` without a time limit); ``link`` is the slowest link inside
    the set; ``spread`` counts the (islands, nodes, switches) touched."""

    gpus: tuple[int, ...]
    probability: float
    slowdown: float
    extra_gpu_seconds: float | None
    link: str
    spread: tuple[int, int, int]
    sources: tuple[str, ...]


@dataclass(frozen=True)
class Explanation:
    """Why the agents decide what they decide on one state."""

    top_jobs: tuple[JobOption, ...]
    job_id: str | None  # the job explained below (the agent's choice unless one was named)
    attention: tuple[tuple[str, float], ...]  # the job's attention to competing jobs, strongest first
    placement: PlacementOption | None  # the agent's GPU set for that job
    alternatives: tuple[PlacementOption, ...]  # the other candidates, most likely first

    def __str__(self) -> str:
        lines = ["job choice:"]
        lines += [f"  {o.job_id or 'WAIT':<24} p={o.probability:.3f}" for o in self.top_jobs]
        if self.job_id is None:
            return "\n".join(lines)
        lines.append(f"job {self.job_id} attends to:")
        lines += [f"  {j:<24} {w:.3f}" for j, w in self.attention]
        for title, opts in (("placement:", (self.placement,)), ("alternatives:", self.alternatives)):
            lines.append(title)
            for o in opts:
                if o is None:
                    continue
                extra = "?" if o.extra_gpu_seconds is None else f"{o.extra_gpu_seconds:.0f}"
                lines.append(
                    f"  p={o.probability:.3f} gpus={list(o.gpus)} link={o.link} slowdown={o.slowdown:.3f} "
                    f"extra GPU-s={extra} spread={o.spread} from {'/'.join(o.sources)}"
                )
        return "\n".join(lines)


class AttentivePolicy(TwoPhasePolicy):
    """`Policy` over a trained `AttentiveNet`: the job agent's logits choose the job, the
    GPU agent scores that job's candidate placements (see the module docstring)."""

    name = "attentive"

    def __init__(self, net: AttentiveNet, fairness: float | None = None, **kwargs) -> None:
        """``fairness``: the setting W of a network that takes it (default
        `DEFAULT_FAIRNESS`); a network without the input refuses one. ``kwargs``:
        `TwoPhasePolicy`'s ``window``, ``max_candidates``, ``deterministic``, ``seed``,
        ``threads``."""
        super().__init__(**kwargs)
        self.net = net.eval()
        self.encoder.urgency = net.cfg.urgency_input
        self.encoder.slowdown_urgency = net.cfg.slowdown_urgency
        if not net.cfg.fairness_input:
            if fairness is not None:
                raise ValueError("this attentive model was trained without the fairness input, so it cannot take "
                                 "fairness=; run it without the parameter or train a model that has it")
            self._fairness = None
        else:
            w = check_fairness(DEFAULT_FAIRNESS if fairness is None else fairness)
            self._fairness = torch.tensor([[w]], dtype=torch.float32)
            if net.cfg.plan_input:
                self.encoder.planner = look_ahead_teacher(w).decide

    @property
    def fairness(self) -> float | None:
        """The fairness setting W the network decides with (``None``: it takes none)."""
        return None if self._fairness is None else float(self._fairness)

    def explain(self, state: ClusterState, job_id: str | None = None, k: int = 5) -> Explanation:
        """The top-``k`` job choices with probabilities, the chosen (or named) job's
        attention to the other jobs, and its GPU set against the alternatives."""
        with torch.inference_mode():
            ctx = Context.of(state)
            include = None
            if job_id is not None:
                ids = [j.job_id for j in state.pending]
                if job_id not in ids:
                    raise ValueError(f"job {job_id} is not pending")
                include = ids.index(job_id)
            view = self.encoder.jobs(ctx, include)
            enc = self._encode(view, need_weights=True)
            probs = torch.softmax(masked(enc.logits, torch.from_numpy(view.action_mask)[None]), -1)[0].numpy()
            W = self.encoder.window
            names = [state.pending[int(i)].job_id if i >= 0 else "" for i in view.index] + [None]
            allowed = np.flatnonzero(view.action_mask)
            top = allowed[np.argsort(-probs[allowed], kind="stable")][:k]
            options = tuple(JobOption(names[a], float(probs[a])) for a in top)
            if job_id is None:
                best = int(top[0]) if len(top) else W
                if best == W:
                    return Explanation(options, None, (), None, ())
                slot = best
            else:
                slot = int(np.flatnonzero(view.index == include)[0])
            job = state.pending[int(view.index[slot])]
            attention = _attention(enc, view, slot, names, k)
            if not view.feasible[slot]:
                return Explanation(options, job.job_id, attention, None, ())
            gv = self.encoder.gpus(ctx, job)
            p = torch.softmax(self._gpu_logits(enc, slot, gv), -1)[0].numpy()
            est = estimated_runtime(job, state)
            opts = sorted(
                (_option(c, float(p[i]), job, est, state) for i, c in enumerate(gv.placements)),
                key=lambda o: -o.probability,
            )
            return Explanation(options, job.job_id, attention, opts[0], tuple(opts[1:]))

    # ---- internals ----

    def _encode(self, view: JobView, need_weights: bool = False) -> JobEncoding:
        return self.net.job_agent(
            torch.from_numpy(view.jobs)[None],
            torch.from_numpy(view.summary)[None],
            torch.from_numpy(view.valid)[None],
            need_weights=need_weights,
            fairness=self._fairness,
            urgency=torch.from_numpy(view.urgency)[None] if self.net.cfg.urgency_input else None,
            feasible=torch.from_numpy(view.feasible)[None],
            plan=torch.from_numpy(view.plan)[None] if self.net.cfg.plan_input else None,
        )

    def _place(self, ctx: Context, enc: JobEncoding, slot: int, job: PendingJob) -> tuple[int, ...]:
        cands = self.encoder.candidates(ctx, job)
        if len(cands) == 1:  # one legal placement: nothing for the GPU agent to choose
            return cands[0].gpus
        gv = self.encoder.gpu_view(ctx, job, cands)
        return gv.placements[self._pick(self._gpu_logits(enc, slot, gv))].gpus

    def _gpu_logits(self, enc: JobEncoding, slot: int, gv: GpuView) -> torch.Tensor:
        logits, _ = self.net.gpu_agent(
            enc.jobs[:, slot],
            torch.from_numpy(gv.nodes)[None],
            torch.ones(1, gv.nodes.shape[0], dtype=torch.bool),
            torch.from_numpy(gv.candidates)[None],
            torch.from_numpy(gv.share)[None],
        )
        return masked(logits, torch.from_numpy(gv.valid)[None])


def _attention(enc: JobEncoding, view: JobView, slot: int, names: list, k: int) -> tuple[tuple[str, float], ...]:
    """The last layer's attention from job ``slot`` to the other jobs, strongest first."""
    assert enc.attention is not None  # encoded with attention weights for explain
    offset = enc.attention.shape[-1] - len(view.valid)  # summary tokens and WAIT come first
    row = enc.attention[0, offset + slot, offset:].numpy()
    others = [s for s in np.flatnonzero(view.valid) if s != slot]
    others.sort(key=lambda s: -row[s])
    return tuple((names[s], float(row[s])) for s in others[:k])


def _option(c: Candidate, probability: float, job: PendingJob, est: float, state: ClusterState) -> PlacementOption:
    extra = (c.slowdown - 1.0) * est * job.num_gpus if math.isfinite(est) else None
    return PlacementOption(
        gpus=c.gpus,
        probability=probability,
        slowdown=c.slowdown,
        extra_gpu_seconds=extra,
        link=c.link.name,
        spread=state.topology.spread(c.gpus),
        sources=c.sources,
    )
