"""Heuristic job choosers: FIFO, SJF, fair-share, Tiresias-style LAS, Slurm multifactor.

Each ranks the pending queue from what Slurm shows live. SJF and LAS need a size estimate
and have only the user's time limit, sharpened by how much that user over-asked on
finished jobs; ``sjf-oracle`` sees true durations and exists only as an upper bound.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from .policy import Ranking
from .state import ClusterState, PendingJob


def estimated_runtime(job: PendingJob, state: ClusterState) -> float:
    """Expected run time from the time limit and the user's history of over-asking;
    ``inf`` when the job has no limit (it may run forever)."""
    if job.time_limit is None:
        return math.inf
    accuracy = state.user(job.user).limit_accuracy
    return job.time_limit * (accuracy if accuracy is not None else 1.0)


def estimated_runtimes(state: ClusterState) -> np.ndarray:
    """``estimated_runtime`` for the whole queue at once (row i = ``state.pending[i]``)."""
    q = state.queue
    users = state.users
    accuracy = np.array([(s.limit_accuracy or 1.0) if (s := users.get(u)) is not None else 1.0 for u in q.users], dtype=float)
    return q.limit * accuracy[q.user] if len(q.users) else q.limit.copy()


def _rank_by(state: ClusterState, *keys: np.ndarray) -> Ranking:
    """Sort by ``keys`` (most significant first), arrival order breaking ties."""
    if not keys:
        return Ranking(state.queue.arrival)
    return Ranking(np.lexsort((state.queue.seq, *reversed(keys))))


@dataclass
class Fifo:
    """First come, first served: submit time, then job id."""

    name: str = "fifo"
    needs_oracle: ClassVar[bool] = False

    def rank(self, state: ClusterState) -> Ranking:
        return _rank_by(state)


@dataclass
class ShortestJobFirst:
    """Shortest estimated run time first (time limit x the user's limit accuracy)."""

    name: str = "sjf"
    needs_oracle: ClassVar[bool] = False

    def rank(self, state: ClusterState) -> Ranking:
        return _rank_by(state, estimated_runtimes(state))


@dataclass
class OracleShortestJobFirst:
    """SJF on the true durations. Not a baseline: an upper bound no live scheduler has."""

    name: str = "sjf-oracle"
    needs_oracle: ClassVar[bool] = True

    def rank(self, state: ClusterState) -> Ranking:
        oracle = state.queue.oracle
        if np.isnan(oracle).any():
            raise ValueError("sjf-oracle needs true durations: run it in the simulator's oracle mode")
        return _rank_by(state, oracle)


@dataclass
class FairShare:
    """Least-served user first (attained GPU-seconds of finished and running jobs), FIFO
    within a user: Slurm's fair-share factor with equal shares and no decay."""

    name: str = "fair-share"
    needs_oracle: ClassVar[bool] = False

    def rank(self, state: ClusterState) -> Ranking:
        q = state.queue
        served = state.attained_service
        per_user = np.array([served.get(u, 0.0) for u in q.users], dtype=float)
        return _rank_by(state, per_user[q.user] if len(q.users) else q.submit)


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
    needs_oracle: ClassVar[bool] = False
    thresholds: tuple[float, ...] = (3600.0, 36_000.0, 360_000.0)  # GPU-seconds
    starvation_factor: float = 2.0

    def rank(self, state: ClusterState) -> Ranking:
        q = state.queue
        est = estimated_runtimes(state)
        queue = np.searchsorted(np.asarray(self.thresholds), q.gpus * est, side="right")
        starving = np.isfinite(est) & (state.now - q.submit > self.starvation_factor * est)
        return _rank_by(state, np.where(starving, 0, queue))


@dataclass
class SlurmMultifactor:
    """Slurm's priority/multifactor as sites commonly set it: age and job size only.

    ``priority = w_age * min(wait / max_age, 1) + w_size * gpus / cluster_gpus``
    (PriorityWeightAge, PriorityWeightJobSize, PriorityMaxAge=7-0, PriorityFavorSmall=NO),
    truncated to an integer as Slurm does, highest first; run with first-fit and backfill
    it emulates a default Slurm site.
    """

    name: str = "slurm-multifactor"
    needs_oracle: ClassVar[bool] = False
    weight_age: float = 1000.0
    weight_size: float = 1000.0
    max_age: float = 7 * 86_400.0

    def rank(self, state: ClusterState) -> Ranking:
        q = state.queue
        age = np.minimum(np.maximum(state.now - q.submit, 0.0) / self.max_age, 1.0)
        prio = np.floor(self.weight_age * age + self.weight_size * q.gpus / state.topology.num_gpus)
        return _rank_by(state, -prio)
