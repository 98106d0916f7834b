"""What a policy returns: a plan both drivers can carry out.

The simulator starts ``starts`` on exactly the GPUs named. The daemon cannot choose GPU
indices in Slurm, so it turns each start into "these nodes, this many GPUs on each", turns
``order`` into Slurm priorities, and turns ``holds`` into reservations so that lower jobs
cannot take GPUs the plan keeps for a blocked job.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import overload

import numpy as np

from .state import PendingJob, RowView


@dataclass(frozen=True, slots=True)
class Start:
    """Start ``job_id`` now on these global GPU ids."""

    job_id: str
    gpus: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Hold:
    """Keep ``gpus`` for ``job_id``, expected to fit at ``expected_start`` (seconds, same
    clock as ``ClusterState.now``); jobs lower in the order may only use them if they end
    before that time."""

    job_id: str
    gpus: tuple[int, ...]
    expected_start: float


class OrderView(Sequence[str]):
    """The job ids of a ranking (``jobs[rows[i]].job_id``), read on demand.

    A replay never reads the order of thousands of pending jobs (only the starts), the
    daemon reads it once per cycle; materialising it at every decision would cost more
    than the decision.
    """

    __slots__ = ("_jobs", "_order", "_view")

    def __init__(self, jobs: Sequence[PendingJob], order: Sequence[int] | np.ndarray) -> None:
        self._jobs, self._order = jobs, order
        self._view: RowView | None = None

    @property
    def _rows(self) -> RowView:
        """The jobs in rank order, the ranking made whole on first read (a chooser may
        have sorted only the few rows the plan read)."""
        if self._view is None:
            self._view = RowView(self._jobs, np.asarray(self._order, dtype=np.int64))
        return self._view

    def __len__(self) -> int:
        return len(self._rows)

    @overload
    def __getitem__(self, i: int) -> str: ...
    @overload
    def __getitem__(self, i: slice) -> tuple[str, ...]: ...
    def __getitem__(self, i: int | slice) -> str | tuple[str, ...]:
        if isinstance(i, slice):
            return tuple(j.job_id for j in self._rows[i])
        return self._rows[i].job_id

    def __iter__(self) -> Iterator[str]:
        return (j.job_id for j in self._rows)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and tuple(self) == tuple(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"OrderView({tuple(self)!r})"


@dataclass(frozen=True, slots=True)
class Plan:
    """``order`` ranks every pending job (best first); ``starts`` and ``holds`` refer to
    jobs in it. ``waited`` is true when the policy chose to start nothing more although
    something fit (an agent's explicit wait)."""

    order: Sequence[str]
    starts: tuple[Start, ...] = ()
    holds: tuple[Hold, ...] = ()
    waited: bool = False

