"""Heuristic job choosers: FIFO, SJF, fair-share, Tiresias-style LAS, Slurm multifactor.

Each ranks the pending queue from what Slurm shows live. SJF and LAS need a size estimate
and have only the user's time limit, sharpened by how much that user over-asked on
finished jobs; ``sjf-oracle`` sees true durations and exists only as an upper bound.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from typing import Callable

from .policy import Ranking
from .state import ClusterState, PendingJob


def estimated_runtime(job: PendingJob, state: ClusterState) -> float:
    """Expected run time from the time limit and the user's history of over-asking;
    ``inf`` when the job has no limit (it may run forever)."""
    if job.time_limit is None:
        return math.inf
    accuracy = state.user(job.user).limit_accuracy
    return job.time_limit * (accuracy if accuracy is not None else 1.0)


def _rank_by(state: ClusterState, key: Callable[[PendingJob], tuple]) -> Ranking:
    pending = state.pending
    return Ranking(tuple(sorted(range(len(pending)), key=lambda i: key(pending[i]))))


@dataclass
class Fifo:
    """First come, first served: submit time, then job id."""

    name: str = "fifo"

    def rank(self, state: ClusterState) -> Ranking:
        return _rank_by(state, lambda j: (j.submit_time, j.job_id))


@dataclass
class ShortestJobFirst:
    """Shortest estimated run time first (time limit x the user's limit accuracy)."""

    name: str = "sjf"

    def rank(self, state: ClusterState) -> Ranking:
        return _rank_by(state, lambda j: (estimated_runtime(j, state), j.submit_time, j.job_id))


@dataclass
class OracleShortestJobFirst:
    """SJF on the true durations. Not a baseline: an upper bound no live scheduler has."""

    name: str = "sjf-oracle"
    needs_oracle: bool = True

    def rank(self, state: ClusterState) -> Ranking:
        def key(j: PendingJob) -> tuple:
            if j.oracle_duration is None:
                raise ValueError("sjf-oracle needs true durations: run it in the simulator's oracle mode")
            return (j.oracle_duration, j.submit_time, j.job_id)

        return _rank_by(state, key)


@dataclass
class FairShare:
    """Least-served user first (attained GPU-seconds of finished and running jobs), FIFO
    within a user: Slurm's fair-share factor with equal shares and no decay."""

    name: str = "fair-share"

    def rank(self, state: ClusterState) -> Ranking:
        served = state.attained_service
        return _rank_by(state, lambda j: (served.get(j.user, 0.0), j.submit_time, j.job_id))


@dataclass
class Tiresias:
    """Tiresias' discretized two-dimensional LAS, made non-preemptive.

    Tiresias ranks by attained GPU-time in a few queues with exponential thresholds, so
    small jobs pass large ones. Under Slurm a pending job has attained nothing, so the
    service counted is what it asks for: GPUs x estimated run time. FIFO inside a queue;
    a job that has waited ``starvation_factor`` times its own estimate is promoted to the
    top queue (Tiresias' STARVELIMIT).
    """

    name: str = "tiresias"
    thresholds: tuple[float, ...] = (3600.0, 36_000.0, 360_000.0)  # GPU-seconds
    starvation_factor: float = 2.0

    def rank(self, state: ClusterState) -> Ranking:
        def key(j: PendingJob) -> tuple:
            est = estimated_runtime(j, state)
            queue = bisect.bisect_right(self.thresholds, j.num_gpus * est)
            if math.isfinite(est) and j.waited(state.now) > self.starvation_factor * est:
                queue = 0
            return (queue, j.submit_time, j.job_id)

        return _rank_by(state, key)


@dataclass
class SlurmMultifactor:
    """Slurm's priority/multifactor as sites commonly set it: age and job size only.

    ``priority = w_age * min(wait / max_age, 1) + w_size * gpus / cluster_gpus``
    (PriorityWeightAge, PriorityWeightJobSize, PriorityMaxAge=7-0, PriorityFavorSmall=NO),
    highest first; run with first-fit and backfill it emulates a default Slurm site.
    """

    name: str = "slurm-multifactor"
    weight_age: float = 1000.0
    weight_size: float = 1000.0
    max_age: float = 7 * 86_400.0

    def rank(self, state: ClusterState) -> Ranking:
        total = state.topology.num_gpus

        def key(j: PendingJob) -> tuple:
            prio = self.weight_age * min(j.waited(state.now) / self.max_age, 1.0) + self.weight_size * j.num_gpus / total
            return (-int(prio), j.submit_time, j.job_id)

        return _rank_by(state, key)
