"""Others' reservations: the nodes slurmctld keeps a job off, by the job's time limit.

slurmctld starts a job that asks for no reservation only on nodes no reservation holds at
any moment from the job's start to the end of its time limit (``job_test_resv`` in
src/slurmctld/reservation.c, ``_foreach_job_test_no_resv``: a reservation overlapping
``[start, start + limit)`` takes its nodes out; a job without a limit counts as running a
year). So an active reservation's nodes are out for every job, whenever its GPUs free up,
and one that begins later only for the jobs whose limit reaches its start: a 30-minute job
pinned to a node whose maintenance begins in two minutes is refused there (and the node
idles until the stall is noticed), while a one-minute job may still start on it.

The jobs running on such nodes stay what they are (their users' service counts, their
GPUs are busy); the plan just never puts a job there that Slurm would refuse.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field

from .records import SlurmReservation

#: The duration slurmctld assumes for a job without a time limit (``YEAR_SECONDS``).
NO_LIMIT = 365 * 86_400.0
#: How much later than the snapshot a pinned job may start: slurmctld schedules on the
#: update at once, or at its next pass (``sched_interval``, 60 s by default). A job whose
#: limit would end within this of a reservation's start is kept off it too.
START_SLACK = 60.0


@dataclass(frozen=True)
class OthersReservations:
    """The reservations not the daemon's that have not ended at ``now``, by start time."""

    now: float
    reservations: tuple[SlurmReservation, ...] = ()
    _cache: dict[float | None, tuple[tuple[str, ...], tuple[str, ...]]] = field(
        default_factory=dict, repr=False, compare=False)

    @classmethod
    def of(cls, reservations: Iterable[SlurmReservation], own: Collection[str], now: float) -> OthersReservations:
        """``own``: names of the daemon's reservations (never in the way of its jobs: each
        cycle decides holds afresh). One Slurm calls active counts from now whatever its
        recorded start."""
        others = [r for r in reservations if r.name not in own and r.nodes and _end(r) > now
                  and (r.start_time is not None or r.active(now))]
        return cls(now, tuple(sorted(others, key=lambda r: (_start(r, now), r.name))))

    def __bool__(self) -> bool:
        return bool(self.reservations)

    def kept_off(self, limit: float | None) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """For a job of time limit ``limit`` (seconds; ``None``: none) started from now on
        (within `START_SLACK`), the nodes slurmctld keeps it off and the reservations that
        do (names)."""
        if limit not in self._cache:
            end = self.now + START_SLACK + (NO_LIMIT if limit is None else limit)
            hit = [r for r in self.reservations if _start(r, self.now) < end]
            nodes = tuple(dict.fromkeys(n for r in hit for n in r.nodes))
            self._cache[limit] = (nodes, tuple(r.name for r in hit))
        return self._cache[limit]

    def beginning_before(self, when: float) -> frozenset[str]:
        """Nodes of the reservations that have not begun and begin before ``when``: a hold
        reservation of the daemon's lasting until then would overlap them (Slurm refuses)."""
        return frozenset(n for r in self.reservations if self.now < _start(r, self.now) < when for n in r.nodes)


def _start(r: SlurmReservation, now: float) -> float:
    if r.active(now):
        return min(now, r.start_time if r.start_time is not None else now)
    return r.start_time if r.start_time is not None else now


def _end(r: SlurmReservation) -> float:
    return math.inf if r.end_time is None else r.end_time
