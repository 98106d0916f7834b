"""Where the daemon meant jobs to go, and where Slurm started them.

Two kinds of memory outlive a cycle and must survive a restart, so both go to the journal:

- **Pins** (``ReqNodeList``) the daemon set. A pin is written to the journal *before* the
  command runs (an intent), then settled from the outcome and the next snapshot: a failed
  pin reverts to the pin it replaces, an unpin or a job that started, ended, vanished or was
  re-pinned by its user drops out. Without this the daemon could not tell its own pins from
  the user's, and hand-back would remove the wrong ones.
- **Starts**: each start the plan made is remembered; when the job is first seen running,
  its GPUs are compared with the plan (``exact``, ``same_nodes``, ``other_nodes``,
  ``unplanned`` when Slurm started a managed job no plan started, or ``not_placed`` for a
  job the daemon orders but does not place: its own node list, an array), for the journal's
  ``placements`` table and ``attentived_placements_total{match}``.
- **Stalls**: a planned start that slurmctld evaluated after the pin and still refused (its
  reason is not merely "Priority" or "None") means the plan saw the nodes wrong (a CPU,
  memory or feature it did not model, a node Slurm will not use). The job is kept off
  those nodes for ``stall_avoid`` seconds (``avoid()``, read by the next state), the stall
  is logged, counted and shown in ``status``; the plan then places it elsewhere or holds.

A pin update that Slurm reports failed may still have been applied (slurmctld sets
``ReqNodeList`` and then refuses the priority of a job that was just held). So a failed
pin is not reverted blindly: ``settle_pins`` reads the job back and journals what Slurm
actually shows.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .apply import Action, Outcome
from .journal import Journal
from .prom import Metrics
from .records import Snapshot
from .snapshot import Built

#: Pending reasons that say nothing against the planned nodes: not evaluated yet, or
#: waiting behind a higher-priority job.
_WAITING_REASONS = frozenset({"", "None", "Priority"})


@dataclass(frozen=True)
class Stall:
    """A planned start Slurm did not make: where, why (Slurm's reason), and until when the
    job is kept off those nodes."""

    job_id: str
    nodes: tuple[str, ...]
    reason: str
    since: float
    until: float

    def as_dict(self) -> dict[str, Any]:
        return {"job": self.job_id, "nodes": list(self.nodes), "reason": self.reason, "since": self.since,
                "avoid_until": self.until}


class PlacementTracker:
    """Pin intents and settlement, planned starts, stalls, and the check of actual starts."""

    def __init__(self, journal: Journal, metrics: Metrics, log: Any) -> None:
        self.journal = journal
        self.metrics = metrics
        self.log = log
        self._known_active: set[str] = set()
        self._last_managed: set[str] = set()
        self._last_constrained: set[str] = set()
        self._planned: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {}
        self._awaiting: dict[str, tuple[tuple[str, ...], float]] = {}  # planned start -> (nodes, first planned)
        self._stalls: dict[str, Stall] = {}

    # ---- pins ---------------------------------------------------------------------------
    def record_pin_intents(self, actions: list[Action], cycle_id: str) -> None:
        """Before applying: the pins about to be set are the daemon's."""
        self.journal.set_pins({a.job_id: a.nodes for a in actions if a.kind == "pin"}, cycle_id)
        self.journal.set_exclusions({a.job_id: a.nodes for a in actions if a.kind == "exclude"})

    def settle_pins(self, outcomes: list[Outcome], owned: dict[str, tuple[str, ...]], snap: Snapshot,
                    readback: Snapshot | None = None) -> None:
        """After applying: keep the pins that hold, forget those that failed or are done.

        ``readback`` (a snapshot taken after a failed pin) says what Slurm really kept: the
        new pin (journalled as the daemon's), the old one, or none."""
        drop: list[str] = []
        for o in outcomes:
            a = o.action
            if a.kind == "pin" and not o.ok:
                job = readback.job(a.job_id) if readback is not None else None
                now_pin = tuple(job.required_nodes) if job is not None else None
                if now_pin == tuple(a.nodes):
                    self.log.warning("pin.applied_despite_error", job=a.job_id, nodes=list(a.nodes), error=o.error)
                elif a.job_id in owned and (now_pin is None or now_pin == tuple(owned[a.job_id])):
                    self.journal.set_pin(a.job_id, owned[a.job_id])
                else:
                    drop.append(a.job_id)
            elif a.kind == "unpin" and o.ok:
                drop.append(a.job_id)
        self._settle_exclusions(outcomes, snap, readback)
        jobs = snap.jobs_by_id
        for job_id, pin in owned.items():
            job = jobs.get(job_id)
            if job is None or not job.pending or (job.required_nodes and tuple(job.required_nodes) != tuple(pin)):
                drop.append(job_id)  # started, ended, vanished, or the user re-pinned it
        if drop:
            self.journal.drop_pins(set(drop))

    def _settle_exclusions(self, outcomes: list[Outcome], snap: Snapshot, readback: Snapshot | None) -> None:
        """Hold exclusions, as pins: a failed one is kept only if Slurm shows it anyway."""
        drop: list[str] = []
        for o in outcomes:
            a = o.action
            if a.kind == "exclude" and not o.ok:
                job = readback.job(a.job_id) if readback is not None else None
                if job is None or tuple(job.excluded_nodes) != tuple(a.nodes):
                    drop.append(a.job_id)
            elif a.kind == "unexclude" and o.ok:
                drop.append(a.job_id)
        jobs = snap.jobs_by_id
        for job_id in self.journal.exclusions():
            job = jobs.get(job_id)
            if job is None or not job.pending:
                drop.append(job_id)
        if drop:
            self.journal.drop_exclusions(set(drop))

    # ---- starts -------------------------------------------------------------------------
    def record_planned(self, cycle_id: str, starts: Mapping[str, tuple[int, ...]], built: Built,
                       holds: Mapping[str, tuple[int, ...]] | None = None) -> None:
        """The starts and holds a live cycle planned (job -> GPU ids), to check where they
        start: a held job Slurm starts on its held nodes is as planned. Only starts are
        awaited (a hold waits by design)."""
        now = built.snapshot.taken_at
        planned = {**(holds or {}), **starts}
        for job_id, gpus in planned.items():
            self._planned[job_id] = (built.gpu_names(gpus), built.nodes_of(gpus))
        self.journal.record_planned_many(cycle_id, [(job_id, *self._planned[job_id]) for job_id in planned])
        for job_id, gpus in starts.items():
            nodes = built.nodes_of(gpus)
            seen = self._awaiting.get(job_id)
            if seen is None or seen[0] != nodes:
                self._awaiting[job_id] = (nodes, now)
        for job_id in [j for j in self._awaiting if j not in starts]:
            del self._awaiting[job_id]

    # ---- stalls -------------------------------------------------------------------------
    def find_stalls(self, snap: Snapshot, avoid_for: float, max_pin_age: float) -> list[Stall]:
        """Planned starts that slurmctld has evaluated since and still not started, and pins
        older than ``max_pin_age`` (a start or hold that never came: pins do not expire in
        Slurm, so the daemon expires them)."""
        now = snap.taken_at
        found: list[Stall] = []
        for job_id, (pin, set_at) in self.journal.pins_set_at().items():
            job = snap.job(job_id)
            if job is None or not job.pending or now - set_at <= max_pin_age or job_id in self._stalls:
                continue
            self._awaiting.pop(job_id, None)
            found.append(self._stall(Stall(job_id, pin, f"pin older than {max_pin_age:.0f} s", now,
                                           now + avoid_for), avoid_for))
        for job_id, (nodes, since) in list(self._awaiting.items()):
            job = snap.job(job_id)
            if job is None or not job.pending:
                del self._awaiting[job_id]
                continue
            evaluated = job.last_evaluated is not None and job.last_evaluated >= since
            if not evaluated or job.reason.split(",")[0].strip() in _WAITING_REASONS:
                continue
            del self._awaiting[job_id]
            found.append(self._stall(Stall(job_id, nodes, job.reason, now, now + avoid_for), avoid_for))
        for job_id, st in list(self._stalls.items()):
            job = snap.job(job_id)
            if st.until <= now or job is None or not job.pending:
                del self._stalls[job_id]
        return found

    def _stall(self, stall: Stall, avoid_for: float) -> Stall:
        self.metrics.stalls.inc()
        self.log.warning("placement.stalled", job=stall.job_id, nodes=list(stall.nodes), reason=stall.reason,
                         avoid_seconds=avoid_for)
        self._stalls[stall.job_id] = stall
        return stall

    def avoid(self) -> dict[str, tuple[str, ...]]:
        """Job -> nodes the next plan must keep it off (its stalled starts)."""
        return {j: s.nodes for j, s in self._stalls.items()}

    def stalls(self) -> list[Stall]:
        return list(self._stalls.values())

    def note_managed(self, built: Built) -> None:
        """The pending jobs this cycle managed: one started before the next cycle without a
        plan is ``unplanned``."""
        self._last_managed = set(built.managed)
        self._last_constrained = set(built.constrained)

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
        started: list[tuple[str, tuple[str, ...], tuple[str, ...], str, float | None]] = []
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
            elif jid in self._last_constrained:
                match = "not_placed"  # ordered only (own node list, an array): Slurm places it
            else:
                match = "unplanned"
            self._planned.pop(jid, None)
            self.metrics.placements.inc(match=match)
            started.append((jid, nodes, names, match, job.start_time))
            self.log.info("job.started", job=jid, nodes=list(nodes), gpus=list(names), match=match,
                          planned=list(planned[jid][0]) if jid in planned else None)
        if not dry_run:
            self.journal.record_started_many(started)
