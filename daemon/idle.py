"""Jobs queued while GPUs they fit on sit idle: the one symptom an operator must hear about.

Whatever the cause (a plan Slurm keeps refusing, a policy waiting too long, a constraint
the daemon does not model), the effect is the same: a job that could start now does not,
cycle after cycle. ``IdleWatch`` notes, each cycle, which managed jobs fit the free GPUs
now (with their CPUs, memory, type and node constraints, ``agents.fit``) and since when
each has fit without starting; the longest such wait is the gauge
``attentived_idle_with_queue_seconds`` and, past ``idle_warn_after``, a warning in
``status``. Only the head of the queue is checked (``LOOK``): enough to see the symptom at
a bounded cost.
"""

from __future__ import annotations

from attentived.agents.fit import Fit
from attentived.agents.placement import Consolidate
from attentived.agents.state import ClusterState

#: Pending jobs (arrival order) checked per cycle.
LOOK = 200


def fitting_now(state: ClusterState, look: int = LOOK) -> list[str]:
    """Ids of the first ``look`` pending jobs (oldest first) that fit the free GPUs now."""
    if not state.num_free or not len(state.pending):
        return []
    fit = Fit.of(state)
    placer = Consolidate()
    out = []
    for i in state.queue.arrival[:look].tolist():
        job = state.pending[i]
        usable = fit.usable(job, state.free)
        if job.num_gpus <= int(usable.sum()) and placer.place(job, usable, state) is not None:
            out.append(job.job_id)
    return out


class IdleWatch:
    """Since when each job has fit the idle GPUs without starting."""

    def __init__(self) -> None:
        self._since: dict[str, float] = {}

    def note(self, state: ClusterState) -> tuple[int, float]:
        """(jobs fitting now, seconds the longest of them has fit without starting)."""
        jobs = fitting_now(state)
        self._since = {j: self._since.get(j, state.now) for j in jobs}
        return len(jobs), max((state.now - t for t in self._since.values()), default=0.0)
