"""The decision loop every learned two-phase policy shares: pick a job (or WAIT), then its GPUs.

`TwoPhasePolicy.decide` repeats one *choice* (a job that can start, and a GPU set for it,
or WAIT) on a copy of the state in which the previous choices have started, until WAIT or
until nothing more fits. The plan's order is the started jobs, then the rest of the job
window by the last job logits, then the jobs outside the window oldest first. For the
highest-ranked job that does not fit now, the plan holds the GPUs where and when it is
expected to fit as running jobs reach their time limits, so the daemon can reserve them as
it does for the heuristics' blocked heads. Behind a WAIT, jobs that cannot delay the held
job and lose nothing by starting now start anyway (`attentived.agents.behind_wait`): a
WAIT never idles GPUs for hours while jobs that could use them wait.

With ``protect`` set (off unless given), jobs their wait has slowed down that much go
first, in the look-ahead's order (`attentived.agents.objective.protected_first`): each
that fits starts, consolidated; the first that does not gets its GPUs kept, and the
network chooses among the jobs that fit on the others. A completion-time policy otherwise
keeps starting one-GPU jobs while a short multi-GPU job waits for GPUs to free at once.

Subclasses say only how they score: `_encode` (the job logits over a `JobView`, ``W``
slots then WAIT) and `_place` (the GPUs for the chosen job). The attentive agents
(`attentived.agents.attentive`) and the DeepRM-style baseline (`attentived.agents.deeprm`)
are the two; both are trained on `attentived.training.gym_env.SchedulingEnv`, whose
job phase shows exactly the `JobView` this loop builds.

Decisions are deterministic (argmax) by default; ``deterministic=False`` samples from a
generator seeded with ``seed``.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

from .behind_wait import PLACER, fill_behind_wait, held, wait_hold
from .features import Context, FeatureEncoder, JobView, start_delays, wait_allowed
from .fit import Fit, kept_for
from .networks import masked
from .objective import (
    DEFAULT_FAIRNESS,
    PROTECT_OFF,
    check_protect,
    fairness_weights,
    protected_first,
)
from .plan import Plan, Start
from .state import ClusterState, PendingJob

REUSE_SHARE = 1 / 1024
"""How long one encoding of the queue serves a plan: while the GPUs started on it are
under this share of the cluster. Up to 1,024 GPUs (every size the agents train and are
evaluated on) the queue is encoded again after every start, as the agents were trained;
on 16,384 GPUs one encoding serves 16 GPUs' worth of starts (a move of 0.1% in the free
share the agent reads), which took a 480-start plan from 480 encodings to about 40. Jobs
the starts made infeasible are masked from the reused logits."""


@dataclass(frozen=True)
class Choice:
    """One decision: start ``job`` (pending index ``index``) on ``gpus``, or WAIT (``job`` None)."""

    job: PendingJob | None
    gpus: tuple[int, ...]
    index: int = -1


class TwoPhasePolicy:
    """`Policy` skeleton over a network that scores job slots and then placements."""

    name = "two-phase"
    needs_oracle = False

    def __init__(
        self,
        *,
        window: int,
        max_candidates: int,
        deterministic: bool = True,
        seed: int = 0,
        threads: int | None = 1,
        protect: float = PROTECT_OFF,
    ) -> None:
        if threads is not None:
            # Batch-of-one inference on small networks is fastest on one thread: with more,
            # torch's thread pool costs 100x the arithmetic (measured 1.3 ms vs 12 us per
            # encoder layer on 2 busy cores). Process-wide; None leaves torch's setting.
            torch.set_num_threads(threads)
        self.encoder = FeatureEncoder(window, max_candidates)
        self.protect = check_protect(protect)
        self.deterministic = deterministic
        self._gen = torch.Generator().manual_seed(seed)

    # ---- what a subclass provides ----

    def _encode(self, view: JobView) -> Any:
        """Whatever `_place` needs later, with ``.logits``: [1, W + 1] unmasked job logits."""
        raise NotImplementedError

    def _place(self, ctx: Context, encoded: Any, slot: int, job: PendingJob) -> tuple[int, ...]:
        """The GPUs for ``job`` (in window slot ``slot``), which fits now."""
        raise NotImplementedError

    @property
    def fairness(self) -> float | None:
        """The fairness setting W the policy decides with (``None``: it takes none)."""
        return None

    # ---- the Policy protocol ----

    def decide(self, state: ClusterState) -> Plan:
        guarded = self._protected(state) if self.protect else []
        return self._decide_guarded(state, guarded) if guarded else self._decide(state)

    def _protected(self, state: ClusterState) -> list[str]:
        """The ids of the jobs ``protect`` puts first, in their order (`protected_first`,
        with the look-ahead cost's urgency at the policy's W, `DEFAULT_FAIRNESS` for a
        model without one; the time until GPUs come back by `start_delays`)."""
        q = state.queue
        if not len(q.gpus):
            return []
        ctx = Context.of(state)
        w = DEFAULT_FAIRNESS if self.fairness is None else self.fairness
        urgency = np.ones(len(q.gpus))
        if w > 0:
            urgency = (1.0 - w) + w * fairness_weights(state, start_delays(ctx, q.gpus.astype(float)), ctx.estimate)
        return [state.pending[i].job_id for i in protected_first(state, ctx.estimate, urgency, self.protect).tolist()]

    def _decide_guarded(self, state: ClusterState, guarded: list[str]) -> Plan:
        """The protected jobs that fit start in order, consolidated; the first that does
        not is held, and the network's plan is made on the GPUs not kept for it."""
        starts: list[Start] = []
        hold = None
        for job_id in guarded:
            index = next(i for i, j in enumerate(state.pending) if j.job_id == job_id)
            job = state.pending[index]
            usable = Fit.of(state).usable(job, state.free)
            gpus = PLACER.place(job, usable, state) if job.num_gpus <= int(np.count_nonzero(usable)) else None
            if gpus is None:
                hold = held(state, index)
                if hold is not None:
                    break
                continue  # it cannot fit even once every running job ends: skip it, as the loop does
            gpus = tuple(int(g) for g in gpus)
            starts.append(Start(job_id, gpus))
            state = _started(state, index, gpus)
        if hold is None:
            rest = self._decide(state)
            late: list[Start] = []
        else:
            kept = state.free.copy()
            kept[list(kept_for(job, hold.gpus, state.topology))] = False
            rest = self._decide(replace(state, free=kept))
            # Jobs whose limits end before the held job is expected to start may use its
            # GPUs meanwhile (EASY backfill), as the look-ahead's model lets them, on the
            # state after the network's starts: their GPUs, CPUs, memory and exclusive
            # nodes booked (highest queue index first, so the others' indices hold).
            at = {j.job_id: i for i, j in enumerate(state.pending)}
            after = state
            for st in sorted(rest.starts, key=lambda st: -at[st.job_id]):
                after = _started(after, at[st.job_id], st.gpus)
            gone = {st.job_id for st in rest.starts}
            late = fill_behind_wait(after, [state.pending[at[j]] for j in rest.order if j not in gone], hold)
        started = (*starts, *rest.starts, *late)
        head = tuple(s.job_id for s in started) + ((hold.job_id,) if hold is not None else ())
        placed = set(head)
        return Plan(
            order=head + tuple(j for j in rest.order if j not in placed),
            starts=started,
            holds=(hold,) if hold is not None else rest.holds,
            waited=rest.waited,
        )

    def _decide(self, state: ClusterState) -> Plan:
        starts: list[Start] = []
        waited = False
        fresh = False  # whether ``view`` and ``enc`` are an encoding of the current state
        with torch.inference_mode():
            ctx = Context.of(state)
            while state.pending and ctx.feasible.any() and not waited:
                view = self.encoder.jobs(ctx)
                enc = self._encode(view)
                fresh = True
                taken: list[int] = []  # queue indices, as of the encoding, of the jobs started on it
                budget = state.topology.num_gpus * REUSE_SHARE
                while True:
                    now_index = _shifted(view.index, taken)
                    mask = view.action_mask.copy()
                    if taken:  # the encoding's own mask no longer holds: jobs started and GPUs went
                        mask[:-1] = view.valid & (now_index >= 0)
                        mask[:-1][mask[:-1]] = ctx.feasible[now_index[mask[:-1]]]
                        mask[-1] = wait_allowed(ctx)
                    if not mask.any():
                        break  # nothing in this window fits any more: look at the queue again
                    slot = self._pick(masked(enc.logits, torch.from_numpy(mask)[None]))
                    if slot == self.encoder.window:
                        waited = True
                        break
                    index = int(now_index[slot])
                    job = state.pending[index]
                    gpus = self._place(ctx, enc, slot, job)
                    starts.append(Start(job.job_id, gpus))
                    state = _started(state, index, gpus)
                    ctx = Context.of(state)
                    fresh = False
                    bisect.insort(taken, int(view.index[slot]))
                    budget -= job.num_gpus
                    if budget <= 0 or not state.pending or not ctx.feasible.any():
                        break
            if not state.pending:
                return Plan(order=tuple(s.job_id for s in starts), starts=tuple(starts))
            if not fresh:  # rank what is left with one more look
                view = self.encoder.jobs(ctx)
                enc = self._encode(view)
        ranked = _rank(state, view, enc.logits[0, : self.encoder.window].numpy())
        blocked = [i for i in ranked if not ctx.feasible[i]]
        plan = self.encoder.plan_of(state)
        hold = wait_hold(state, blocked, plan)
        if waited:
            filled = fill_behind_wait(state, [state.pending[i] for i in ranked], hold, plan)
            starts += filled
            gone = {s.job_id for s in filled}
            ranked = [i for i in ranked if state.pending[i].job_id not in gone]
        return Plan(
            order=tuple(s.job_id for s in starts) + tuple(state.pending[i].job_id for i in ranked),
            starts=tuple(starts),
            holds=(hold,) if hold is not None else (),
            waited=waited,
        )

    def ranking(self, state: ClusterState) -> list[int]:
        """Queue indices, best first, by one encoding of ``state`` (the job logits the
        first choice of `decide` is made from, WAIT aside): the job window by logit, then
        the other jobs oldest first. One network call, what a search that takes the
        agent's proposals can afford at every decision."""
        with torch.inference_mode():
            view = self.encoder.jobs(Context.of(state))
            enc = self._encode(view)
        return _rank(state, view, enc.logits[0, : self.encoder.window].numpy())

    def choose(self, state: ClusterState) -> Choice:
        """One decision (a job and its GPUs, or WAIT): what the latency benchmark times."""
        with torch.inference_mode():
            return self._choose(Context.of(state))[0]

    # ---- internals ----

    def _pick(self, logits: torch.Tensor) -> int:
        if self.deterministic:
            return int(torch.argmax(logits, -1)[0])
        return int(torch.multinomial(torch.softmax(logits, -1), 1, generator=self._gen)[0, 0])

    def _choose(self, ctx: Context) -> tuple[Choice, JobView, Any]:
        view = self.encoder.jobs(ctx)
        enc = self._encode(view)
        slot = self._pick(masked(enc.logits, torch.from_numpy(view.action_mask)[None]))
        if slot == self.encoder.window:
            return Choice(None, ()), view, enc
        index = int(view.index[slot])
        job = ctx.state.pending[index]
        return Choice(job, self._place(ctx, enc, slot, job), index), view, enc


def _shifted(index: np.ndarray, taken: list[int]) -> np.ndarray:
    """Queue indices of an encoding's window slots now that the jobs at ``taken`` (indices
    as of the encoding, ascending) have started and left the queue; -1 for those jobs
    and for padding."""
    gone = np.asarray(taken, dtype=np.int64)
    out = index - np.searchsorted(gone, index)
    if len(gone):
        out[np.isin(index, gone)] = -1
    out[index < 0] = -1
    return out


def _started(state: ClusterState, index: int, gpus: tuple[int, ...]) -> ClusterState:
    """``state`` after pending job ``index`` starts on ``gpus`` now: its GPUs (its whole
    nodes when exclusive) busy, its CPUs and memory taken from its nodes' capacity."""
    fit = Fit.of(state)
    run = fit.started(state.pending[index], gpus, state.now)
    return state.started(index, run, fit.capacity())


def _rank(state: ClusterState, view: JobView, logits: np.ndarray) -> list[int]:
    """Queue indices: the window by logit (best first), then the others oldest first (by
    submit time, then queue index; from the queue's arrays: sorting 10,000 jobs by a Python
    key was 50 ms of a 1 s plan at 16,384 GPUs)."""
    k = int(view.valid.sum())
    window = view.index[:k][np.argsort(-logits[:k], kind="stable")]
    outside = np.ones(len(state.pending), bool)
    outside[window] = False
    others = np.flatnonzero(outside)
    others = others[np.lexsort((others, state.queue.submit[others]))]
    return window.tolist() + others.tolist()
