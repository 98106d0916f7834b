"""Schedule quality from job records: the same code for replays, the demo and live runs.

Definitions (times in seconds):
- JCT = end - submit; wait = start - submit; percentiles are numpy's linear ones.
- bounded slowdown = mean of max(1, JCT / max(runtime, 10 s)) (Feitelson's bound keeps
  seconds-long jobs from dominating).
- makespan = last end - first submit; utilization = busy GPU-seconds / (GPUs x makespan).
- ``jain_fairness`` = Jain's index over users' mean waits, (sum x)^2 / (n sum x^2): 1 when
  every user waits the same on average, 1/n when one user does all the waiting; 1.0 when no
  user waited at all. It is scale-free, so it rewards making *everyone* wait equally long:
  FIFO with random placement scores best on it (docs/simulator.md). Kept because the
  research system reports it; do not optimise it.
- ``max_user_wait`` = the worst-off user's mean wait: what a fairness goal should protect.
- ``jain_slowdown`` = Jain's index over users' mean bounded slowdown, a job's
  max(1, (wait + run) / max(run, 10 s)): equal when every user's jobs are delayed in
  proportion to their size, and not improved by delaying anyone. (Without the floor at 1,
  as until 2026-12-06, a job shorter than 10 s that did not wait counted below 1, and
  delaying it up to 10 s raised its user's mean toward the others'. On held-out Philly
  windows the floor moves the index by at most 0.0002; on the demo's jobs of seconds more.)
- ``wait_ratio`` = max / min of users' mean waits (min floored at 1 s).
- communication cost = extra GPU-seconds caused by non-ideal placement,
  sum (runtime - ideal duration) x GPUs; ``multi_gpu_slowdown`` = mean runtime / ideal
  duration over multi-GPU jobs.
- lower-bound ratio = avg JCT / mean ideal duration (1.0 = no job waited or slowed down).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from .engine import JobRecord

#: The keys ``replay --json`` prints per policy, in order.
SUMMARY_KEYS = (
    "jobs",
    "avg_jct",
    "p50_jct",
    "p95_jct",
    "p99_jct",
    "avg_wait",
    "p99_wait",
    "makespan",
    "utilization",
    "jain_fairness",
    "max_user_wait",
    "jain_slowdown",
    "comm_cost",
    "lower_bound_ratio",
    "multi_gpu_slowdown",
)


def jain(values: Sequence[float]) -> float:
    x = np.asarray(values, dtype=float)
    if len(x) == 0 or not np.any(x):
        return 1.0
    return float(x.sum() ** 2 / (len(x) * np.square(x).sum()))


def user_mean_waits(records: Sequence[JobRecord]) -> dict[str, float]:
    waits: dict[str, list[float]] = defaultdict(list)
    for r in records:
        waits[r.user].append(r.wait)
    return {u: float(np.mean(w)) for u, w in sorted(waits.items())}


def user_mean_slowdowns(records: Sequence[JobRecord]) -> dict[str, float]:
    """Each user's mean of max(1, (wait + run) / max(run, 10 s))."""
    out: dict[str, list[float]] = defaultdict(list)
    for r in records:
        run = r.end_time - r.start_time
        out[r.user].append(max(1.0, (r.wait + run) / max(run, 10.0)))
    return {u: float(np.mean(v)) for u, v in sorted(out.items())}


def summarize(records: Sequence[JobRecord], num_gpus: int) -> dict[str, float]:
    """Every metric of the module docstring; ``SUMMARY_KEYS`` first, extras after."""
    if not records:
        raise ValueError("no finished jobs to summarize")
    submit = np.array([r.submit_time for r in records])
    start = np.array([r.start_time for r in records])
    end = np.array([r.end_time for r in records])
    ideal = np.array([r.ideal_duration for r in records])
    gpus = np.array([r.num_gpus for r in records], dtype=float)
    jct, wait, run = end - submit, start - submit, end - start
    makespan = float(end.max() - submit.min())
    per_user = user_mean_waits(records)
    multi = gpus > 1
    user_waits = list(per_user.values())
    return {
        "jobs": len(records),
        "avg_jct": float(jct.mean()),
        "p50_jct": float(np.percentile(jct, 50)),
        "p95_jct": float(np.percentile(jct, 95)),
        "p99_jct": float(np.percentile(jct, 99)),
        "avg_wait": float(wait.mean()),
        "p99_wait": float(np.percentile(wait, 99)),
        "makespan": makespan,
        "utilization": float((gpus * run).sum() / (num_gpus * makespan)) if makespan > 0 else 0.0,
        "jain_fairness": jain(user_waits),
        "max_user_wait": float(max(user_waits)),
        "jain_slowdown": jain(list(user_mean_slowdowns(records).values())),
        "comm_cost": float(((run - ideal) * gpus).sum()),
        "lower_bound_ratio": float(jct.mean() / ideal.mean()),
        "bounded_slowdown": float(np.maximum(1.0, jct / np.maximum(run, 10.0)).mean()),
        "wait_ratio": float(max(user_waits) / max(min(user_waits), 1.0)),
        "multi_gpu_slowdown": float((run[multi] / ideal[multi]).mean()) if multi.any() else 1.0,
        "users": len(per_user),
    }
