"""A seeded synthetic workload rich in multi-GPU jobs, written as a generic-format trace.

The public traces are dominated by 1-GPU jobs (Philly: 90% of jobs), so they say little
about placement. This generator makes the opposite case, where most GPU time belongs to
4- and 8-GPU (and some 16-GPU) data-parallel jobs and where placement decides run time:

* **Sizes**: 1, 2, 4, 8, 16 GPUs with probabilities ``GPU_MIX`` (60% of jobs ask for 4+).
* **Durations** (at the ideal placement): lognormal, median ``median_hours`` (1 h),
  sigma 1.0, clipped to [5 min, 3 days]; independent of size.
* **Users**: ``users`` tenants with Zipf(1.2) activity, so a few users submit most jobs
  (what fairness is about).
* **Arrivals**: a Poisson process whose rate gives the requested ``load`` on a cluster of
  ``cluster_gpus`` GPUs (requested GPU-seconds per second / GPUs), modulated by a day/night
  cycle (rate x (1 + 0.5 sin)), as real clusters see.
* **Models**: left empty, so the replay draws them per (seed, job id) from the profiled
  Pollux mix (multi-GPU jobs never get the 1-GPU-only NCF) like any trace without models:
  each comparison seed then also varies the models.

Deterministic for its arguments: numpy's ``default_rng(seed)`` with fixed calls, and the
file is written with ``repr`` floats (rounded to the second for readability).
"""

from __future__ import annotations

import csv
import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from attentived.atomic import write_file

__all__ = ["GPU_MIX", "SyntheticJob", "generate", "write_trace"]

GPU_MIX: tuple[tuple[int, float], ...] = ((1, 0.20), (2, 0.20), (4, 0.30), (8, 0.25), (16, 0.05))
"""(GPUs, probability) of a job's size."""

MIN_SECONDS = 300.0
MAX_SECONDS = 3 * 86_400.0
SIGMA = 1.0
DAY_AMPLITUDE = 0.5


@dataclass(frozen=True)
class SyntheticJob:
    job_id: str
    submit_time: float
    user: str
    num_gpus: int
    duration: float


def generate(num_jobs: int, cluster_gpus: int, load: float, seed: int = 0, *, users: int = 12,
             median_hours: float = 1.0) -> list[SyntheticJob]:
    """``num_jobs`` jobs offering ``load`` (e.g. 1.2 = 20% more work than the cluster can
    do while jobs arrive) to ``cluster_gpus`` GPUs."""
    if num_jobs < 1 or cluster_gpus < 1 or users < 1:
        raise ValueError("num_jobs, cluster_gpus and users must be positive")
    if not (math.isfinite(load) and load > 0):
        raise ValueError(f"load must be a positive number, got {load}")
    rng = np.random.default_rng(seed)
    sizes = np.array([g for g, _ in GPU_MIX])
    probs = np.array([p for _, p in GPU_MIX])
    gpus = rng.choice(sizes, size=num_jobs, p=probs / probs.sum())
    gpus = np.minimum(gpus, cluster_gpus)
    dur = np.clip(median_hours * 3600.0 * np.exp(SIGMA * rng.standard_normal(num_jobs)), MIN_SECONDS, MAX_SECONDS)
    weights = 1.0 / np.arange(1, users + 1) ** 1.2
    user = rng.choice(users, size=num_jobs, p=weights / weights.sum())
    # Mean requested GPU-seconds per job, from the mix (not the sample) so the load is the
    # one asked for in expectation.
    mean_work = float((gpus * dur).mean())
    rate = load * cluster_gpus / mean_work  # jobs per second
    # Day/night: thinning of a Poisson process at the peak rate (1 + DAY_AMPLITUDE) x rate,
    # keeping an arrival at time t with probability (1 + A sin(2 pi t / day)) / (1 + A).
    peak = rate * (1 + DAY_AMPLITUDE)
    times: list[float] = []
    clock = 0.0
    while len(times) < num_jobs:
        cand = clock + np.cumsum(rng.exponential(1.0 / peak, size=2 * num_jobs))
        keep = rng.random(len(cand)) < (1 + DAY_AMPLITUDE * np.sin(2 * math.pi * cand / 86_400.0)) / (1 + DAY_AMPLITUDE)
        times.extend(cand[keep].tolist())
        clock = float(cand[-1])
    t = np.array(times[:num_jobs])
    t -= t[0]
    return [
        SyntheticJob(f"syn-{i}", float(round(t[i])), f"user{int(user[i]) + 1:02d}", int(gpus[i]), float(round(dur[i])))
        for i in range(num_jobs)
    ]


def write_trace(path: str | os.PathLike[str], jobs: list[SyntheticJob]) -> Path:
    """Write ``jobs`` as a generic trace (``job_id,submit_time,user,num_gpus,duration,model``)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)

    def write(tmp: Path) -> None:
        with tmp.open("w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["job_id", "submit_time", "user", "num_gpus", "duration", "model"])
            for j in jobs:
                w.writerow([j.job_id, f"{j.submit_time:.0f}", j.user, j.num_gpus, f"{j.duration:.0f}", ""])

    write_file(path, write)
    return path


def main(argv: list[str] | None = None) -> None:
    """``python -m attentived.simulator.synthetic OUT.csv --jobs N --gpus G --load X --seed S``"""
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--jobs", type=int, default=800)
    ap.add_argument("--gpus", type=int, default=128, help="GPUs of the cluster the load is for")
    ap.add_argument("--load", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--users", type=int, default=12)
    a = ap.parse_args(argv)
    write_trace(a.out, generate(a.jobs, a.gpus, a.load, a.seed, users=a.users))


if __name__ == "__main__":
    main()
