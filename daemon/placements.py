"""Where the daemon meant jobs to go, and where Slurm started them.

Two kinds of memory outlive a cycle and must survive a restart, so both go to the journal:

- **Pins** (``ReqNodeList``) the daemon set. A pin is written to the journal *before* the
  command runs (an intent), then settled from the outcome and the next snapshot: a failed
  pin reverts to the pin it replaces, an unpin or a job that started, ended, vanished or was
  re-pinned by its user drops out. Without this the daemon could not tell its own pins from
  the user's, and hand-back would remove the wrong ones.
- **Starts**: each start the plan made is remembered; when the job is first seen running,
  its GPUs are compared with the plan (``exact``, ``same_nodes``, ``other_nodes``, or
  ``unplanned`` when Slurm started a managed job no plan started), for the journal's
  ``placements`` table and ``attentived_placements_total{match}``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from .apply import Action, Outcome
from .journal import Journal
from .prom import Metrics
from .records import Snapshot
from .snapshot import Built


class PlacementTracker:
    """Pin intents and settlement, planned starts and the check of actual starts."""

    def __init__(self, journal: Journal, metrics: Metrics, log: Any) -> None:
        self.journal = journal
        self.metrics = metrics
        self.log = log
        self._known_active: set[str] = set()
        self._last_managed: set[str] = set()
        self._planned: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {}

    # ---- pins ---------------------------------------------------------------------------
    def record_pin_intents(self, actions: list[Action], cycle_id: str) -> None:
        """Before applying: the pins about to be set are the daemon's."""
        for a in actions:
            if a.kind == "pin":
                self.journal.set_pin(a.job_id, a.nodes, cycle_id)

    def settle_pins(self, outcomes: list[Outcome], owned: dict[str, tuple[str, ...]], snap: Snapshot) -> None:
        """After applying: keep the pins that hold, forget those that failed or are done."""
        drop: list[str] = []
        for o in outcomes:
            a = o.action
            if a.kind == "pin" and not o.ok:
                if a.job_id in owned:
                    self.journal.set_pin(a.job_id, owned[a.job_id])
                else:
                    drop.append(a.job_id)
            elif a.kind == "unpin" and o.ok:
                drop.append(a.job_id)
        jobs = snap.jobs_by_id
        for job_id, pin in owned.items():
            job = jobs.get(job_id)
            if job is None or not job.pending or (job.required_nodes and tuple(job.required_nodes) != tuple(pin)):
                drop.append(job_id)  # started, ended, vanished, or the user re-pinned it
        if drop:
            self.journal.drop_pins(set(drop))

    # ---- starts -------------------------------------------------------------------------
    def record_planned(self, cycle_id: str, starts: Mapping[str, tuple[int, ...]], built: Built) -> None:
        """The starts a live cycle planned (job -> GPU ids), to check when they start."""
        for job_id, gpus in starts.items():
            names, nodes = built.gpu_names(gpus), built.nodes_of(gpus)
            self._planned[job_id] = (names, nodes)
            self.journal.record_planned(cycle_id, job_id, names, nodes)

    def note_managed(self, built: Built) -> None:
        """The pending jobs this cycle managed: one started before the next cycle without a
        plan is ``unplanned``."""
        self._last_managed = set(built.managed)

    def track_starts(self, snap: Snapshot, built: Built, dry_run: bool) -> None:
        """Compare where jobs started with where the plan put them (journal + metric).

        A job seen running for the first time is checked when a plan started it (this run
        or, from the journal, an earlier one) or when it was a managed pending job last cycle
        and no plan started it ("unplanned": Slurm started it between cycles)."""
        active = {j.job_id: j for j in snap.jobs if j.active and j.gpus > 0}
        new = [jid for jid in active if jid not in self._known_active]
        self._known_active = set(active)
        if not new:
            return
        planned = {j: self._planned[j] for j in new if j in self._planned}
        lookup = [j for j in new if j not in planned]
        if lookup:
            for jid, row in self.journal.planned(lookup).items():
                if row.get("planned_gpus") and not row.get("started_at"):
                    planned[jid] = (tuple(json.loads(row["planned_gpus"])), tuple(json.loads(row["planned_nodes"] or "[]")))
        topo = built.topology
        for jid in new:
            if jid not in planned and jid not in self._last_managed:
                continue
            job = active[jid]
            names = tuple(sorted(topo.gpu_name(g) for g in built.running_gpus.get(jid, ())))
            nodes = tuple(job.nodes)
            if jid in planned:
                p_names, p_nodes = planned[jid]
                match = "exact" if tuple(sorted(p_names)) == names else (
                    "same_nodes" if sorted(p_nodes) == sorted(nodes) else "other_nodes")
            else:
                match = "unplanned"
            self._planned.pop(jid, None)
            self.metrics.placements.inc(match=match)
            if not dry_run:
                self.journal.record_started(jid, nodes, names, match, job.start_time)
            self.log.info("job.started", job=jid, nodes=list(nodes), gpus=list(names), match=match,
                          planned=list(planned[jid][0]) if jid in planned else None)
