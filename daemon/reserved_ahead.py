"""Others' reservations that have not begun: the nodes slurmctld keeps a job off, by its limit.

slurmctld starts a job that asks for no reservation only on nodes no reservation holds at
any moment from the job's start to the end of its time limit (``job_test_resv`` in
src/slurmctld/reservation.c: a reservation overlapping ``[start, start + limit)`` takes
its nodes out; a job without a limit counts as running a year). An active reservation's
nodes are simply not free (`snapshot.build_state`). One that begins later takes its nodes
only from the jobs whose limit reaches its start: a 30-minute job pinned to a node whose
maintenance begins in two minutes is refused there, and the node idles until the stall is
noticed, while a one-minute job may still start on it. Likewise, a running job's GPUs go
to such a reservation, not to the queue, when the job is expected to end inside it.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field

from .records import SlurmReservation

#: The duration slurmctld assumes for a job without a time limit (``YEAR_SECONDS``).
NO_LIMIT = 365 * 86_400.0


@dataclass(frozen=True)
class ReservedAhead:
    """The reservations of others that are not active at ``now``, by start time."""

    now: float
    reservations: tuple[SlurmReservation, ...] = ()
    _cache: dict[float | None, tuple[tuple[str, ...], tuple[str, ...]]] = field(
        default_factory=dict, repr=False, compare=False)

    @classmethod
    def of(cls, reservations: Iterable[SlurmReservation], own: Collection[str], now: float) -> ReservedAhead:
        """``own``: names of the daemon's reservations (never in the way of its jobs: each
        cycle decides holds afresh). A reservation Slurm has not started although its start
        has passed (its state lags) counts from now."""
        ahead = [r for r in reservations if r.name not in own and r.nodes and r.start_time is not None
                 and not r.active(now) and _end(r) > now]
        return cls(now, tuple(sorted(ahead, key=lambda r: (r.start_time or 0.0, r.name))))

    def __bool__(self) -> bool:
        return bool(self.reservations)

    def kept_off(self, limit: float | None) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """For a job of time limit ``limit`` (seconds; ``None``: none) starting now, the
        nodes slurmctld keeps it off and the reservations that do (names)."""
        if limit not in self._cache:
            end = self.now + (NO_LIMIT if limit is None else limit)
            hit = [r for r in self.reservations if (r.start_time or 0.0) < end]
            nodes = tuple(dict.fromkeys(n for r in hit for n in r.nodes))
            self._cache[limit] = (nodes, tuple(r.name for r in hit))
        return self._cache[limit]

    def taking_at(self, when: float) -> frozenset[str]:
        """The nodes whose GPUs, freed at ``when``, go to one of these reservations."""
        return frozenset(n for r in self.reservations if (r.start_time or 0.0) <= when < _end(r) for n in r.nodes)


def _end(r: SlurmReservation) -> float:
    return math.inf if r.end_time is None else r.end_time
