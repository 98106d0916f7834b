"""What a policy returns: a plan both drivers can carry out.

The simulator starts ``starts`` on exactly the GPUs named. The daemon cannot choose GPU
indices in Slurm, so it turns each start into "these nodes, this many GPUs on each", turns
``order`` into Slurm priorities, and turns ``holds`` into reservations so that lower jobs
cannot take GPUs the plan keeps for a blocked job.
"""

from __future__ import annotations

from dataclasses import dataclass


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


@dataclass(frozen=True, slots=True)
class Plan:
    """``order`` ranks every pending job (best first); ``starts`` and ``holds`` refer to
    jobs in it. ``waited`` is true when the policy chose to start nothing more although
    something fit (an agent's explicit wait)."""

    order: tuple[str, ...]
    starts: tuple[Start, ...] = ()
    holds: tuple[Hold, ...] = ()
    waited: bool = False

    @property
    def started_ids(self) -> frozenset[str]:
        return frozenset(s.job_id for s in self.starts)
