"""The time limit a user would have asked for, for traces that record none.

Slurm kills a job at its time limit, and a scheduler plans with limits, not with true run
times: backfill, reservations and the expected release of busy GPUs all come from them.
The public traces (Philly, Tiresias, Alibaba) record only how long jobs ran, so a replay
that used those durations as limits would hand every policy perfect foresight. This module
models the request instead, from two well-documented habits:

* Users over-ask. Logs of batch clusters show requested limits well above run times,
  seldom tight, with a long tail of generous requests (Tsafrir, Etsion and Feitelson,
  "Modeling user runtime estimates", JSSPP 2005). We draw the factor
  ``f = limit / duration`` from a lognormal with median 1.6 and sigma 0.5 (one job in six
  asks for more than 2.6x) and clip it at 1.05 (one in five) so that a job the trace says
  completed would indeed have finished within its limit. This is kinder than the logs,
  where many jobs use a small fraction of their limit, so limits here say more about run
  times than on a real cluster; weigh gains of limit-aware policies with that in mind.
* Requests are round numbers (the same paper: a few values cover most requests), and Slurm
  sites cap and round them (partition ``MaxTime``, QOS ``MaxWall``, submit wrappers that
  offer 1h/4h/1d). So ``duration * f`` is rounded up to the next value of a menu of usual
  limits: 15m, 30m, 1h, 2h, 4h, 8h, 12h, 1d, 2d, 3d, 7d, 14d, 30d, and beyond 30 days the
  next whole day. Rounding is what makes short jobs look much longer than they are (a
  2-minute job asks for 15 minutes), as on real clusters.

The draw is a pure function of (seed, job id): the same job gets the same limit whatever
the order of jobs, the filters applied to the trace or the policy being compared. It hashes
the pair with BLAKE2b into a uniform number and maps it through the normal quantile
function, instead of seeding a numpy Generator per job, so the limits stay the same across
numpy versions (numpy does not promise stable streams for its distributions) and cost
microseconds per job.
"""

from __future__ import annotations

import bisect
import hashlib
import math
from collections.abc import Iterable
from statistics import NormalDist
from typing import Protocol

__all__ = ["LIMIT_MENU", "MEDIAN_FACTOR", "MIN_FACTOR", "SIGMA", "time_limit", "time_limits"]

MEDIAN_FACTOR = 1.6
"""Median of limit / duration before rounding."""
SIGMA = 0.5
"""Standard deviation of log(limit / duration) before clipping and rounding."""
MIN_FACTOR = 1.05
"""Smallest factor: a job recorded as completing must finish within its limit."""

_MINUTE, _HOUR, _DAY = 60.0, 3600.0, 86400.0
LIMIT_MENU: tuple[float, ...] = (
    15 * _MINUTE, 30 * _MINUTE,
    1 * _HOUR, 2 * _HOUR, 4 * _HOUR, 8 * _HOUR, 12 * _HOUR,
    1 * _DAY, 2 * _DAY, 3 * _DAY, 7 * _DAY, 14 * _DAY, 30 * _DAY,
)  # fmt: skip
"""Round limits in seconds; requests are rounded up to one of them (beyond: whole days)."""

_STANDARD_NORMAL = NormalDist()


class _Job(Protocol):
    """What `time_limits` needs of a job (a `TraceJob` has it)."""

    @property
    def job_id(self) -> str: ...

    @property
    def duration(self) -> float: ...


def time_limit(job_id: str, duration: float, seed: int) -> float:
    """The modelled time limit in seconds (at least 1.05 x ``duration``) of one job."""
    if not (math.isfinite(duration) and duration > 0):
        raise ValueError(f"job {job_id}: duration must be a positive number of seconds, got {duration}")
    factor = math.exp(math.log(MEDIAN_FACTOR) + SIGMA * _standard_normal(job_id, seed))
    wanted = duration * max(MIN_FACTOR, factor)
    index = bisect.bisect_left(LIMIT_MENU, wanted)
    if index < len(LIMIT_MENU):
        return LIMIT_MENU[index]
    return math.ceil(wanted / _DAY) * _DAY


def time_limits(jobs: Iterable[_Job], seed: int) -> dict[str, float]:
    """Time limits of many jobs by job id; each is `time_limit` of that job alone."""
    limits: dict[str, float] = {}
    for job in jobs:
        if job.job_id in limits:
            raise ValueError(f"duplicate job id {job.job_id!r}: time limits are drawn per job id")
        limits[job.job_id] = time_limit(job.job_id, job.duration, seed)
    return limits


def _standard_normal(job_id: str, seed: int) -> float:
    """A standard normal draw that depends only on (seed, job_id)."""
    digest = hashlib.blake2b(f"{seed}:{job_id}".encode(), digest_size=8).digest()
    uniform = ((int.from_bytes(digest, "big") >> 11) + 0.5) / 2**53  # in (0, 1), never 0 or 1
    return _STANDARD_NORMAL.inv_cdf(uniform)
