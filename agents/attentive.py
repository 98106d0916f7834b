"""The ``attentive`` policy: the trained job and GPU agents behind `Policy.decide`.

At each decision point the job agent picks a job that can start (or WAIT), the GPU agent
picks one of that job's candidate placements, the job starts in a copy of the state, and
the loop repeats until WAIT or until nothing more fits. The plan's order is the started
jobs, then the rest of the window by the job agent's last logits, then the jobs outside
the window oldest first. For the highest-ranked job that does not fit now, the plan holds
the GPUs where and when it is expected to fit as running jobs reach their time limits, so
the daemon can reserve them as it does for the heuristics' blocked heads.

Evaluation is deterministic (argmax in both agents); ``deterministic=False`` samples
from a seeded generator instead.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path

import numpy as np
import torch

from .checkpoint import load_model
from .features import Candidate, Context, FeatureEncoder, GpuView, JobView
from .networks import AttentiveNet, JobEncoding, masked
from .order import estimated_runtime
from .placement import Consolidate
from .plan import Hold, Plan, Start
from .state import ClusterState, PendingJob, QueueArrays, RunningJob

DEFAULT_MODEL = "attentive-default.pt"


def default_model_path() -> Path:
    """The model shipped in the package (``attentived/data/models/attentive-default.pt``)."""
    return Path(str(files("attentived.data") / "models" / DEFAULT_MODEL))


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


@dataclass(frozen=True)
class Choice:
    """One decision of the two agents: start ``job`` (pending index ``index``) on
    ``gpus``, or WAIT (``job`` None)."""

    job: PendingJob | None
    gpus: tuple[int, ...]
    index: int = -1


class AttentivePolicy:
    """`Policy` over a trained `AttentiveNet` (see the module docstring)."""

    name = "attentive"

    def __init__(
        self,
        net: AttentiveNet,
        *,
        window: int,
        max_candidates: int,
        deterministic: bool = True,
        seed: int = 0,
        threads: int | None = 1,
    ) -> None:
        if threads is not None:
            # Batch-of-one inference on a 66-token encoder is fastest on one thread: with
            # more, torch's thread pool costs 100x the arithmetic (measured 1.3 ms vs 12 us
            # per layer on 2 busy cores). Process-wide; pass None to leave torch's setting.
            torch.set_num_threads(threads)
        self.net = net.eval()
        self.encoder = FeatureEncoder(window, max_candidates)
        self.deterministic = deterministic
        self._gen = torch.Generator().manual_seed(seed)
        self._hold_placer = Consolidate()

    # ---- the Policy protocol ----

    def decide(self, state: ClusterState) -> Plan:
        starts: list[Start] = []
        waited = False
        with torch.inference_mode():
            while state.pending:
                ctx = Context.of(state)
                if not ctx.feasible.any():
                    break
                choice, view, enc = self._choose(ctx)
                if choice.job is None:
                    waited = True
                    break
                starts.append(Start(choice.job.job_id, choice.gpus))
                state = _started(state, choice.index, choice.gpus)
            if not state.pending:
                return Plan(order=tuple(s.job_id for s in starts), starts=tuple(starts))
            if not waited:  # nothing fits any more: rank what is left with one more look
                view = self.encoder.jobs(ctx)
                enc = self._encode(view)
        ranked = _rank(state, view, enc.logits[0, : self.encoder.window].numpy())
        blocked = [i for i in ranked if not ctx.feasible[i]]
        hold = self._hold(state, blocked[0]) if blocked else None
        return Plan(
            order=tuple(s.job_id for s in starts) + tuple(state.pending[i].job_id for i in ranked),
            starts=tuple(starts),
            holds=(hold,) if hold is not None else (),
            waited=waited,
        )

    def choose(self, state: ClusterState) -> Choice:
        """One decision (a job and its GPUs, or WAIT): what the latency benchmark times."""
        with torch.inference_mode():
            return self._choose(Context.of(state))[0]

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
        )

    def _gpu_logits(self, enc: JobEncoding, slot: int, gv: GpuView) -> torch.Tensor:
        logits, _ = self.net.gpu_agent(
            enc.jobs[:, slot],
            torch.from_numpy(gv.nodes)[None],
            torch.ones(1, gv.nodes.shape[0], dtype=torch.bool),
            torch.from_numpy(gv.candidates)[None],
            torch.from_numpy(gv.share)[None],
        )
        return masked(logits, torch.from_numpy(gv.valid)[None])

    def _pick(self, logits: torch.Tensor) -> int:
        if self.deterministic:
            return int(torch.argmax(logits, -1)[0])
        return int(torch.multinomial(torch.softmax(logits, -1), 1, generator=self._gen)[0, 0])

    def _choose(self, ctx: Context) -> tuple[Choice, JobView, JobEncoding]:
        view = self.encoder.jobs(ctx)
        enc = self._encode(view)
        slot = self._pick(masked(enc.logits, torch.from_numpy(view.action_mask)[None]))
        if slot == self.encoder.window:
            return Choice(None, ()), view, enc
        index = int(view.index[slot])
        job = ctx.state.pending[index]
        gv = self.encoder.gpus(ctx, job)
        k = self._pick(self._gpu_logits(enc, slot, gv))
        return Choice(job, gv.placements[k].gpus, index), view, enc

    def _hold(self, state: ClusterState, idx: int) -> Hold | None:
        """Where and when pending job ``idx`` is expected to fit: release running jobs' GPUs
        by their expected ends until a consolidated placement exists."""
        job = state.pending[idx]
        future = state.free.copy()
        for run in sorted(state.running, key=lambda r: (r.expected_end(state.now), r.job_id)):
            future[list(run.gpus)] = True
            if future.sum() < job.num_gpus:
                continue
            gpus = self._hold_placer.place(job, future, state)
            if gpus is not None:
                return Hold(job.job_id, tuple(int(g) for g in gpus), run.expected_end(state.now))
        return None


def _started(state: ClusterState, index: int, gpus: tuple[int, ...]) -> ClusterState:
    """``state`` after pending job ``index`` starts on ``gpus`` now."""
    job = state.pending[index]
    free = state.free.copy()
    free[list(gpus)] = False
    keep = np.ones(len(state.pending), bool)
    keep[index] = False
    q = state.queue
    return ClusterState(
        now=state.now,
        topology=state.topology,
        free=free,
        pending=state.pending[:index] + state.pending[index + 1 :],
        running=state.running + (RunningJob(job.job_id, job.user, gpus, job.submit_time, state.now, job.time_limit),),
        users=state.users,
        queue_arrays=QueueArrays(q.seq[keep], q.submit[keep], q.gpus[keep], q.limit[keep],
                                 q.oracle[keep], q.user[keep], q.users),
    )


def _rank(state: ClusterState, view: JobView, logits: np.ndarray) -> list[int]:
    """Queue indices: the window by logit (best first), then the others oldest first."""
    k = int(view.valid.sum())
    window = [int(view.index[s]) for s in np.argsort(-logits[:k], kind="stable")]
    inside = set(window)
    others = sorted((i for i in range(len(state.pending)) if i not in inside), key=lambda i: (state.pending[i].submit_time, i))
    return window + others


def _attention(enc: JobEncoding, view: JobView, slot: int, names: list, k: int) -> tuple[tuple[str, float], ...]:
    """The last layer's attention from job ``slot`` to the other jobs, strongest first."""
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


def load_attentive(path: str | None = None, seed: int = 0) -> AttentivePolicy:
    """The attentive policy from a model file (default: the shipped model). Deterministic
    (argmax); ``seed`` seeds sampling for callers that switch ``deterministic`` off."""
    model = load_model(path if path is not None else default_model_path())
    return AttentivePolicy(model.net, window=model.window, max_candidates=model.max_candidates, seed=seed)
