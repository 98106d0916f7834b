"""The training reward: job completion time, fairness of waiting, communication cost.

Each term is built so that its sum over an episode is the evaluation metric it stands for,
which makes returns readable and the weights comparable:

* JCT: each step pays for the job-seconds spent in the system (pending or running) since
  the previous step, divided by the episode's total ideal run time. Summed over an episode
  it is ``-sum(JCT) / sum(ideal duration)``, minus the *lower-bound ratio* of
  `attentived.simulator.metrics` (1.0 = nobody waited or slowed down). Waiting and
  placement slowdowns both count, as they do in JCT.
* Fairness: a potential-based term, ``J(after) - J(before)``, with ``J`` Jain's index over
  users' mean waits so far (finished and started jobs' waits, plus pending jobs' waits up
  to now). The potentials telescope: the episode sum is ``J(end) - 1``, where ``J(end)``
  is exactly the Jain fairness the benchmark reports. Potential-based shaping (Ng et al.,
  1999) also means the term adds no spurious optimum of its own.
* Communication: at each start, the GPU-seconds the placement wastes compared with the
  ideal one, ``(runtime - ideal) * GPUs``, divided by the episode's ideal GPU-seconds. The
  episode sum is ``-comm_cost / ideal GPU-seconds``: the fraction of useful GPU time lost
  to bad placements.

The reward reads true durations (to know when started jobs end and what a placement
costs): it is the simulator's judgement of an outcome, never an input to the agents, which
see only `ClusterState`.

Defaults (`RewardWeights`): ``jct = 1`` is the unit. ``fairness = 2``: on the Philly
validation windows the presets span 0.33-0.62 in Jain and 2.8-7.6 in lower-bound ratio,
so a weight of 2 makes a 0.1 Jain gain worth a 0.2 lower-bound-ratio loss: fairness counts
but cannot buy an arbitrarily slow schedule. ``comm = 2``: a placement that wastes 10% of
the useful GPU time costs 0.2 of lower-bound ratio on top of the JCT it already loses
through slower jobs, because wasted GPU-time also delays everyone queued behind it.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from attentived.agents.state import ClusterState
from attentived.simulator.engine import SimJob
from attentived.simulator.metrics import jain


@dataclass(frozen=True)
class RewardWeights:
    """Weights of the three reward terms (see the module docstring for the defaults)."""

    jct: float = 1.0
    fairness: float = 2.0
    comm: float = 2.0

    def __post_init__(self) -> None:
        for name in ("jct", "fairness", "comm"):
            if getattr(self, name) < 0:
                raise ValueError(f"reward weight {name} must be non-negative, got {getattr(self, name)}")


@dataclass(frozen=True)
class RewardTerms:
    """One step's reward split by term (already weighted); ``total`` is their sum."""

    jct: float = 0.0
    fairness: float = 0.0
    comm: float = 0.0

    @property
    def total(self) -> float:
        return self.jct + self.fairness + self.comm

    def __add__(self, other: RewardTerms) -> RewardTerms:
        return RewardTerms(self.jct + other.jct, self.fairness + other.fairness, self.comm + other.comm)


class RewardTracker:
    """Follows one episode and prices each step; ``reset`` at the start of the episode.

    Call `start` when a job starts (gives the communication term) and `advance` whenever
    the simulation clock or the set of started jobs changed (gives the JCT and fairness
    terms for the interval since the last call).
    """

    def __init__(self, jobs: Sequence[SimJob], weights: RewardWeights = RewardWeights()) -> None:
        if not jobs:
            raise ValueError("an episode needs jobs")
        self.weights = weights
        self._submits = np.sort([s.job.submit_time for s in jobs])
        self._submit_prefix = np.concatenate([[0.0], np.cumsum(self._submits)])
        self._ideal_seconds = float(sum(s.job.duration for s in jobs))
        self._ideal_gpu_seconds = float(sum(s.job.duration * s.job.num_gpus for s in jobs))
        self.reset()

    def reset(self) -> None:
        self._now = 0.0
        self._ends: list[float] = []
        self._finished = 0
        self._finished_end_sum = 0.0
        self._started_wait: dict[str, float] = defaultdict(float)
        self._started: dict[str, int] = defaultdict(int)
        self._accrued = 0.0
        self._potential = 1.0

    def start(self, user: str, submit: float, now: float, num_gpus: int, ideal: float, runtime: float) -> RewardTerms:
        """A job started: record its end and wait; price its placement."""
        heapq.heappush(self._ends, now + runtime)
        self._started_wait[user] += now - submit
        self._started[user] += 1
        wasted = (runtime - ideal) * num_gpus
        return RewardTerms(comm=-self.weights.comm * wasted / self._ideal_gpu_seconds)

    def advance(self, now: float, state: ClusterState | None) -> RewardTerms:
        """The clock is at ``now``; ``state`` is the snapshot there (``None`` at the end)."""
        accrued = self._accrued_jct(now)
        potential = self._fairness(now, state)
        terms = RewardTerms(
            jct=-self.weights.jct * (accrued - self._accrued) / self._ideal_seconds,
            fairness=self.weights.fairness * (potential - self._potential),
        )
        self._now, self._accrued, self._potential = now, accrued, potential
        return terms

    def _accrued_jct(self, t: float) -> float:
        """Job-seconds in the system up to ``t``: sum over arrived jobs of min(t, end) - submit."""
        while self._ends and self._ends[0] <= t:
            self._finished_end_sum += heapq.heappop(self._ends)
            self._finished += 1
        arrived = int(np.searchsorted(self._submits, t, side="right"))
        in_system = arrived * t - self._submit_prefix[arrived]
        return float(in_system - (self._finished * t - self._finished_end_sum))

    def _fairness(self, now: float, state: ClusterState | None) -> float:
        waits = dict(self._started_wait)
        counts = dict(self._started)
        for j in state.pending if state is not None else ():
            waits[j.user] = waits.get(j.user, 0.0) + j.waited(now)
            counts[j.user] = counts.get(j.user, 0) + 1
        return jain([waits[u] / counts[u] for u in counts])
