"""The training reward: job completion time, fairness of waiting, communication cost.

Each term is built so that its sum over an episode is the evaluation metric it stands for,
which makes returns readable and the weights comparable:

* JCT: each step pays for the job-seconds spent in the system (pending or running) since
  the previous step, divided by the episode's total ideal run time. Summed over an episode
  it is ``-sum(JCT) / sum(ideal duration)``, minus the *lower-bound ratio* of
  `attentived.simulator.metrics` (1.0 = nobody waited or slowed down). Waiting and
  placement slowdowns both count, as they do in JCT.
* Fairness, scaled by the episode's fairness setting ``W`` in [0, 1]: a potential-based
  term, ``P(after) - P(before)``, with ``P = -RMS over the episode's users of their mean
  wait so far / the mean ideal run time`` (a user's mean counts started jobs' waits and
  pending jobs' waits up to now; a user with nothing submitted yet counts 0; with
  ``fairness_power = p`` it is their power mean). It moves at every step in which anyone
  waits, and more for the users who have waited most (the derivative of the root mean
  square in a user's mean is proportional to that mean, of a power mean to that mean to
  the power ``p - 1``), so it protects the worst-off; and since ``P`` only falls when
  anyone waits longer, it never rewards delaying anyone. (Jain's index over users' mean waits, the term it replaces, is
  scale-free: it rewarded making everyone wait equally long.) The potentials telescope to
  ``-user_wait_power_mean(records, p)``, computed from the finished episode.
  Potential-based shaping (Ng et al., 1999) adds no spurious optimum of its own.
* Communication: at each start, the GPU-seconds the placement wastes compared with the
  ideal one, ``(runtime - ideal) * GPUs``, divided by the episode's ideal GPU-seconds. The
  episode sum is ``-comm_cost / ideal GPU-seconds``: the fraction of useful GPU time lost
  to bad placements.

The reward reads true durations (to know when started jobs end and what a placement
costs): it is the simulator's judgement of an outcome, never an input to the agents, which
see only `ClusterState`.

Defaults (`RewardWeights`): ``jct = 1`` is the unit. ``fairness = 2`` at ``W = 1``: the
users' RMS mean wait in units of the mean run time is of the order of the lower-bound
ratio minus one (the mean job's wait in the same unit), larger when one user waits far
longer than the rest; a weight of 2 at ``W = 1`` makes the worst-off users' waits count
about twice a plain wait, and ``W = 0`` leaves completion time and placement alone. ``comm = 2``: a placement that wastes 10% of
the useful GPU time costs 0.2 of lower-bound ratio on top of the JCT it already loses
through slower jobs, because wasted GPU-time also delays everyone queued behind it.
"""

from __future__ import annotations

import heapq
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from attentived.agents.objective import check_fairness
from attentived.agents.state import ClusterState
from attentived.simulator.engine import JobRecord, SimJob
from attentived.simulator.metrics import user_mean_waits


@dataclass(frozen=True)
class RewardWeights:
    """Weights of the three reward terms (see the module docstring for the defaults)."""

    jct: float = 1.0
    fairness: float = 2.0
    comm: float = 2.0
    fairness_power: float = 2.0
    """The power ``p`` of the fairness term's mean over users: 2 is their root mean square;
    a larger ``p`` gives the worst-off users more of the signal (a user's share of its
    derivative goes as their mean wait to the power ``p - 1``), and the mean of one
    user's wait among ``U`` users fades as ``U ** (-1 / p)`` rather than ``U ** (-1 / 2)``."""

    def __post_init__(self) -> None:
        for name in ("jct", "fairness", "comm"):
            if getattr(self, name) < 0:
                raise ValueError(f"reward weight {name} must be non-negative, got {getattr(self, name)}")
        if not 1.0 <= self.fairness_power <= 16.0:  # waits of 1e7 s to the 16th stay finite
            raise ValueError(f"fairness_power must be in [1, 16], got {self.fairness_power}")


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

    def __init__(self, jobs: Sequence[SimJob], weights: RewardWeights = RewardWeights(), fairness: float = 1.0) -> None:
        if not jobs:
            raise ValueError("an episode needs jobs")
        self.weights = weights
        self.fairness = check_fairness(fairness)
        self._submits = np.sort([s.job.submit_time for s in jobs])
        self._submit_prefix = np.concatenate([[0.0], np.cumsum(self._submits)])
        self._ideal_seconds = float(sum(s.job.duration for s in jobs))
        self._ideal_gpu_seconds = float(sum(s.job.duration * s.job.num_gpus for s in jobs))
        self._users = len({s.job.user for s in jobs})
        self._mean_ideal = self._ideal_seconds / len(jobs)
        self.reset()

    def reset(self) -> None:
        self._now = 0.0
        self._ends: list[float] = []
        self._finished = 0
        self._finished_end_sum = 0.0
        self._started_wait: dict[str, float] = defaultdict(float)
        self._started: dict[str, int] = defaultdict(int)
        self._accrued = 0.0
        self._potential = 0.0

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
            fairness=self.weights.fairness * self.fairness * (potential - self._potential),
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
        """The potential: minus the users' power mean wait so far, in mean run times."""
        waits = dict(self._started_wait)
        counts = dict(self._started)
        for j in state.pending if state is not None else ():
            waits[j.user] = waits.get(j.user, 0.0) + j.waited(now)
            counts[j.user] = counts.get(j.user, 0) + 1
        means = [waits[u] / counts[u] for u in counts]
        return -power_mean(means, self._users, self.weights.fairness_power) / self._mean_ideal


def power_mean(values: Sequence[float], n: int, p: float) -> float:
    """``(sum(v ** p) / n) ** (1 / p)`` over non-negative values, the ``n - len(values)``
    missing ones counting 0."""
    return _root(sum(v ** p for v in values) / n, p)


def user_wait_power_mean(records: Sequence[JobRecord], p: float = 2.0) -> float:
    """What the fairness term sums to over an episode, negated: the power mean (power
    ``p``; 2 is the root mean square) over users of their mean wait, in units of the mean
    ideal run time."""
    waits = np.array(list(user_mean_waits(records).values()))
    mean_ideal = float(np.mean([r.ideal_duration for r in records]))
    return _root(float(np.mean(np.power(waits, p))), p) / mean_ideal


def _root(x: float, p: float) -> float:
    """``x ** (1 / p)``; at ``p = 2`` ``math.sqrt``, the arithmetic of the recipes trained
    before the power was a setting, so that they train bit for bit as they did
    (``x ** 0.5`` may differ from it in the last bit)."""
    return math.sqrt(x) if p == 2.0 else float(x ** (1.0 / p))
