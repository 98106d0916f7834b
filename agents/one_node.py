"""Jobs that fit on one node run on one node: any policy, wrapped (``POLICY:one_node=1``).

Why: in the speed model a job split over nodes pays the network on every all-reduce, and
the split jobs are the long multi-GPU ones. On held-out Philly windows the few 4- and
8-GPU jobs that policies split ran 1.4-3x longer than on one node and held their GPUs that
much longer, which cost every policy 6-11% of its avg JCT (docs/results.md, "One node
for the jobs that fit one"). The look-ahead weighs a split against waiting for a node
(`SlowdownTable`); the rule takes the choice away from every policy, heuristics included.

The wrapped policy decides on a view of the snapshot in which each such job reads as
``sbatch -N 1``, so every part of it (orders, the look-ahead's model, placers, the agents'
inputs and masks) plans it on one node. The plan is a plan for the real snapshot: the
queue keeps its positions, and one node is a valid placement of a job that fixed no node
count; the daemon carries it out by pinning the job to that node. Jobs that fixed their
node count, or where they may run (``-w``, ``-x``, features, a GPU type, ``--exclusive``),
keep what their user asked.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from .plan import Plan
from .state import ClusterState, PendingJob, RowView


class OneNode:
    """``inner`` deciding as if every job that fits on one node had asked for one node."""

    def __init__(self, inner: Any, name: str) -> None:
        self.inner = inner
        self.name = name
        self._shaped: dict[str, tuple[PendingJob, PendingJob]] = {}  # job id -> (as asked, as shown)

    def __getattr__(self, attr: str) -> Any:
        # everything else the drivers read (needs_oracle, chooser, placer, the daemon's
        # fallback and warm-up) is the inner policy's own; an agent explains the view it
        # decides on (only an agent has ``explain``, and callers ask ``hasattr``)
        found = getattr(self.inner, attr)
        if attr == "explain":
            return lambda state, *args, **kwargs: found(self.view(state), *args, **kwargs)
        return found

    def decide(self, state: ClusterState) -> Plan:
        return self.inner.decide(self.view(state))

    def view(self, state: ClusterState) -> ClusterState:
        """``state`` with the jobs that fit one node shown as ``-N 1`` jobs."""
        widest = int(np.diff(state.topology.node_first_gpu).max())
        gpus = state.queue.gpus
        if not ((gpus > 1) & (gpus <= widest)).any():
            return state
        pending = state.pending
        if len(self._shaped) > 2 * len(pending) + 1024:  # a daemon sees jobs come and go for months
            self._shaped.clear()
        jobs, at = (pending._jobs, pending._rows) if isinstance(pending, RowView) else (pending, np.arange(len(pending)))
        return replace(state, pending=RowView(_Shown(jobs, lambda job: self._shown(job, widest)), at))

    def _shown(self, job: PendingJob, widest: int) -> PendingJob:
        if not 1 < job.num_gpus <= widest or job.num_nodes is not None or job.placement_constrained:
            return job
        cached = self._shaped.get(job.job_id)
        if cached is None or cached[0] is not job:
            cached = self._shaped[job.job_id] = (job, replace(job, num_nodes=1))
        return cached[1]


class _Shown(Sequence[PendingJob]):
    """A driver's job table read through `OneNode._shown`, job by job as a policy reads it."""

    __slots__ = ("_jobs", "_show")

    def __init__(self, jobs: Sequence[PendingJob], show) -> None:
        self._jobs = jobs
        self._show = show

    def __len__(self) -> int:
        return len(self._jobs)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return tuple(self._show(j) for j in self._jobs[i])
        return self._show(self._jobs[i])
