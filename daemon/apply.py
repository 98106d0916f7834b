"""Plan -> the smallest list of Slurm actions that makes Slurm carry it out.

What the daemon wants from Slurm (``Desired``), from one ``Plan``:

- **Priorities.** Managed pending jobs get distinct priorities, descending in this order:
  the jobs the plan starts now (the most GPUs first, `start_order`: Slurm starts them in
  that order and the first ones' cores decide which socket the next ones' GPUs come
  from), then held jobs, then the rest (in plan order). Under ``sched/builtin`` + ``priority/multifactor`` Slurm then starts exactly the
  planned jobs, in the plan's order. Existing priorities that already respect the order are
  kept (the longest such subsequence); only the others are given new values between their
  kept neighbours, so an unchanged plan issues no update and a new job costs one.
- **Pins.** Each planned start is pinned to its planned nodes (``ReqNodeList``); Slurm
  picks the GPU indices on them. Pins the daemon set on jobs that are no longer planned are
  removed; pins a user set are never touched (such jobs are ordered, not placed).
- **Holds.** ``hold_mode = "block"`` (default): the held job is pinned to its held nodes
  and keeps the top priority after the starts, with no reservation. Pinned to busy nodes it
  fails with "nodes busy", which under ``sched/builtin`` blocks lower jobs of its partition
  (and ``sched/backfill`` plans around it); the moment its GPUs free up Slurm starts it
  there. A reservation would break both: a job pinned to nodes reserved for someone else
  fails with "node not available", which slurmctld does *not* count as a blocked partition,
  and a whole-node reservation for a 1-GPU hold idles the node's other GPUs for every
  partition. ``"attach"``: a reservation ``<prefix><jobid>`` on the nodes the job takes
  whole (without GPU TRES in reservations Slurm reserves only whole nodes), ``Users=`` the
  job's user, ``Flags=IGNORE_JOBS`` when any is busy, minus nodes backfilled now, and the
  job is attached to it.
- **Clean-up.** The daemon's own reservations (by the journal's record, never by name
  alone, never a maintenance one) that no hold wants are deleted (after detaching pending
  jobs of the managed partitions; one a job still runs inside is ended now and deleted once
  the job is gone). Reservations are renewed when less than half their lease is left.

Actions run in an order that is safe if the daemon dies half way: detach and unpin, delete
or end, create or update reservations, then per job (highest first) pin + priority in one
``scontrol update``. A failed action is logged and journaled; the rest still runs.
"""

from __future__ import annotations

import bisect
import math
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from attentived.agents.plan import Plan
from attentived.agents.slurm_select import start_order
from attentived.topology import hostlist

from .backend import Backend
from .records import (
    NOT_SENT,
    CommandResult,
    JobUpdate,
    SlurmReservation,
    Snapshot,
    controller_gone,
    refused_for_db_index,
)
from .snapshot import Built, in_partitions

JOB_KINDS = ("priority", "pin", "unpin", "exclude", "unexclude", "attach", "detach")
#: How a reservation a job still runs in is ended: a few seconds ahead, because Slurm refuses
#: an end time equal to the start time of a reservation created this very second.
END_SOON = "now+5"


@dataclass(frozen=True)
class Action:
    """One change to Slurm. ``value``: a priority, a node list, minutes, ... by kind."""

    kind: str
    job_id: str = ""
    reservation: str = ""
    value: str = ""
    nodes: tuple[str, ...] = ()
    users: tuple[str, ...] = ()
    ignore_jobs: bool = False
    reason: str = ""

    def describe(self) -> str:
        target = f"job {self.job_id}" if self.job_id else f"reservation {self.reservation}"
        extra = self.value or ",".join(self.nodes)
        return f"{self.kind} {target}" + (f" = {extra}" if extra else "")

    def as_dict(self) -> dict[str, object]:
        return {k: v for k, v in (("kind", self.kind), ("job", self.job_id), ("reservation", self.reservation),
                                  ("value", self.value), ("nodes", list(self.nodes)), ("users", list(self.users)),
                                  ("ignore_jobs", self.ignore_jobs), ("reason", self.reason)) if v not in ("", [], False)}


@dataclass
class HoldSpec:
    job_id: str
    name: str
    nodes: tuple[str, ...]
    users: tuple[str, ...]
    ignore_jobs: bool
    expected_start: float


@dataclass
class Desired:
    order: list[str]  # managed job ids, highest priority first
    pins: dict[str, tuple[str, ...]]  # job -> nodes (planned starts and held jobs, unconstrained)
    holds: dict[str, HoldSpec]  # reservation name -> spec
    starts: dict[str, tuple[int, ...]]  # job -> planned global GPU ids
    notes: list[str] = field(default_factory=list)
    exclusions: dict[str, tuple[str, ...]] = field(default_factory=dict)  # held job -> ExcNodeList (all but its nodes)


@dataclass(frozen=True)
class Settings:
    reservation_prefix: str = "attentived-"
    hold_mode: str = "block"
    reservation_ttl: float = 900.0
    priority_floor: int = 1_000_000
    priority_ceiling: int = 2_000_000_000
    priority_step: int = 1000

    @classmethod
    def from_config(cls, cfg: object) -> Settings:
        return cls(**{k: getattr(cfg, k) for k in cls.__dataclass_fields__})

    def in_band(self, priority: int) -> bool:
        return self.priority_floor <= priority <= self.priority_ceiling


# ---- desired state ---------------------------------------------------------------------------


def desired_state(plan: Plan, built: Built, settings: Settings) -> Desired:
    managed = built.managed
    known = [j for j in plan.order if j in managed]
    known_set = set(known)  # a set, once: managed queues run to 10,000s of jobs
    missing = [j for j in managed if j not in known_set]
    started = [s.job_id for s in start_order(plan.starts) if s.job_id in managed]
    started_set = set(started)
    held = [h.job_id for h in plan.holds if h.job_id in managed and h.job_id not in started_set]
    first = started_set | set(held)
    order = started + held + [j for j in known if j not in first] + missing
    notes: list[str] = []
    if missing:
        notes.append(f"plan left out {len(missing)} managed job(s); they go last")
    pins: dict[str, tuple[str, ...]] = {}
    starts: dict[str, tuple[int, ...]] = {}
    start_nodes: set[str] = set()
    for s in plan.starts:
        if s.job_id not in managed:
            continue
        starts[s.job_id] = tuple(s.gpus)
        nodes = built.nodes_of(s.gpus)
        start_nodes.update(nodes)
        if s.job_id in built.constrained:
            notes.append(f"job {s.job_id} keeps its own placement constraints: not pinned")
            continue
        pins[s.job_id] = nodes
    holds: dict[str, HoldSpec] = {}
    exclusions: dict[str, tuple[str, ...]] = {}
    every_node = sorted((n.name for n in built.snapshot.nodes), key=hostlist.natural_key)
    taken: set[str] = set()
    snode = built.snapshot.nodes_by_name
    busy_nodes = _busy_nodes(built) if settings.hold_mode == "attach" and plan.holds else set()
    # an attach hold's reservation lasts a lease from now: Slurm refuses it where another
    # reservation begins within that time
    booked = (built.others.beginning_before(built.state.now + settings.reservation_ttl)
              if settings.hold_mode == "attach" and plan.holds and built.others else frozenset())
    topo = built.topology
    for h in plan.holds:
        job = managed.get(h.job_id)
        if job is None or h.job_id in starts:
            continue
        if h.job_id in built.constrained:
            notes.append(f"job {h.job_id} keeps its own placement constraints: not pinned, no reservation")
            continue
        held_nodes = built.nodes_of(h.gpus)
        if settings.hold_mode == "block":
            if job.excluded_nodes and h.job_id not in built.own_exclusions:
                notes.append(f"job {h.job_id} keeps its own node exclusions: held in order, not placed")
                continue
            exclusions[h.job_id] = tuple(n for n in every_node if n not in held_nodes)
            continue
        per_node: dict[str, int] = {}
        for g in h.gpus:
            name_ = topo.nodes[int(topo.gpu_node[int(g)])].name
            per_node[name_] = per_node.get(name_, 0) + 1
        whole = [n for n in held_nodes if per_node[n] >= topo.nodes[topo.node_index[n]].num_gpus]
        partial = [n for n in held_nodes if n not in whole]
        if partial:
            notes.append(f"hold of job {h.job_id}: no reservation on {','.join(partial)} (it needs only some of their GPUs)")
        nodes = tuple(n for n in whole if n not in start_nodes)
        if booked & set(nodes):
            notes.append(f"hold of job {h.job_id}: no reservation on {','.join(n for n in nodes if n in booked)} "
                         "(a reservation of someone else's begins there within the lease)")
            nodes = tuple(n for n in nodes if n not in booked)
        if not nodes:
            continue
        if taken & set(nodes):
            notes.append(f"hold of job {h.job_id} overlaps an earlier hold: no reservation")
            continue
        taken.update(nodes)
        ignore = any(n in busy_nodes or (n in snode and snode[n].busy) for n in nodes)
        name = settings.reservation_prefix + h.job_id
        holds[name] = HoldSpec(h.job_id, name, nodes, (job.user,), ignore, h.expected_start)
    return Desired(order=order, pins=pins, holds=holds, starts=starts, notes=notes, exclusions=exclusions)


def _busy_nodes(built: Built) -> set[str]:
    """Nodes some running job holds GPUs on (for ``IGNORE_JOBS``), in one pass over the
    running jobs' GPU ids rather than one node lookup per job."""
    gpus = [g for held in built.running_gpus.values() for g in held]
    if not gpus:
        return set()
    topo = built.topology
    return {topo.nodes[int(i)].name for i in np.unique(topo.gpu_node[np.asarray(gpus, dtype=np.int64)])}


# ---- priorities ------------------------------------------------------------------------------


def assign_priorities(order: Sequence[str], current: Mapping[str, int], settings: Settings) -> dict[str, int]:
    """New priorities for the jobs of ``order`` (highest first) whose current value breaks it.

    Keeps the longest subsequence of in-band values that already descend strictly, and fits
    the others between their kept neighbours (``priority_step`` apart at the ends, evenly
    spread inside a gap). When a gap is too small everything is numbered afresh, centred in
    the band so both ends keep room.
    """
    lo_band, hi_band, step = settings.priority_floor, settings.priority_ceiling, settings.priority_step
    vals = [current.get(j) for j in order]
    in_band = {i: v for i, v in enumerate(vals) if v is not None and lo_band <= v <= hi_band}
    cand = list(in_band)
    keep = set(_longest_descending([in_band[i] for i in cand]))
    kept = [cand[k] for k in sorted(keep)]
    if not kept:
        return _renumber(order, settings)
    out: dict[str, int] = {}
    anchors = [-1, *kept, len(order)]
    for a, b in zip(anchors, anchors[1:]):
        gap = list(range(a + 1, b))
        if not gap:
            continue
        hi = vals[a] if a >= 0 else None
        lo = vals[b] if b < len(order) else None
        values = _fill(hi, lo, len(gap), lo_band, hi_band, step)
        if values is None:
            return _renumber(order, settings)
        out.update({order[i]: v for i, v in zip(gap, values)})
    return out


def _fill(hi: int | None, lo: int | None, k: int, floor: int, ceiling: int, step: int) -> list[int] | None:
    """k strictly descending integers strictly between hi and lo (band ends when None)."""
    if hi is None and lo is None:
        return None
    if hi is None:  # before the first kept job: step above it, else spread up to the ceiling
        assert lo is not None
        if lo + step * k <= ceiling:
            return [lo + step * (k - t) for t in range(k)]
        hi = ceiling + 1
    elif lo is None:  # after the last kept job
        if hi - step * k >= floor:
            return [hi - step * (t + 1) for t in range(k)]
        lo = floor - 1
    assert hi is not None and lo is not None
    if hi - lo - 1 < k:
        return None
    span = hi - lo
    return [hi - (span * (t + 1)) // (k + 1) for t in range(k)]


def _renumber(order: Sequence[str], settings: Settings) -> dict[str, int]:
    n = len(order)
    if n == 0:
        return {}
    room = settings.priority_ceiling - settings.priority_floor
    step = min(settings.priority_step, room // (n + 1))
    if step < 1:
        raise ValueError(f"{n} jobs do not fit between priority_floor and priority_ceiling")
    mid = (settings.priority_floor + settings.priority_ceiling) // 2
    top = min(settings.priority_ceiling, mid + step * n // 2)
    return {job: top - step * t for t, job in enumerate(order)}


def _longest_descending(values: Sequence[int]) -> list[int]:
    """Indices of a longest strictly descending subsequence (patience sorting, O(n log n))."""
    neg = [-v for v in values]
    tails: list[int] = []  # tails[k] = smallest -value ending an increasing run of length k+1
    tails_idx: list[int] = []
    prev = [-1] * len(neg)
    for i, x in enumerate(neg):
        k = bisect.bisect_left(tails, x)
        if k == len(tails):
            tails.append(x)
            tails_idx.append(i)
        else:
            tails[k] = x
            tails_idx[k] = i
        prev[i] = tails_idx[k - 1] if k > 0 else -1
    out: list[int] = []
    i = tails_idx[-1] if tails_idx else -1
    while i >= 0:
        out.append(i)
        i = prev[i]
    return out[::-1]


# ---- the diff --------------------------------------------------------------------------------


def plan_actions(desired: Desired, built: Built, settings: Settings, owned_pins: Mapping[str, tuple[str, ...]],
                 now: float | None = None) -> list[Action]:
    """The actions that take Slurm from ``built.snapshot`` to ``desired``, in apply order.

    Only the daemon's own reservations (``built.own_reservations``) and jobs of the managed
    partitions are ever named in an action, and never a job Slurm will not let the daemon
    update now (``built.left_to_slurm``): its pin or exclusion of the daemon's stays until
    Slurm takes updates of it again (each try would cost 5 s and be refused). A reservation
    of the daemon's that such a job waits in cannot be deleted (Slurm refuses while a job
    waits in it, and the job cannot be detached), so it is ended instead: Slurm then unlinks
    the waiting job itself, which is what leaving the job to Slurm means, and the held nodes
    are not kept from other jobs until the lease runs out."""
    snap = built.snapshot
    now = snap.taken_at if now is None else now
    jobs = snap.jobs_by_id
    own = built.own_reservations
    early: list[Action] = []  # detach, unpin
    resv: list[Action] = []

    # pending jobs attached to our reservations that should not be (block mode: none should)
    foreign = {r.name for r in snap.reservations if r.name not in own}
    attach_wanted = ({spec.job_id: name for name, spec in desired.holds.items() if name not in foreign}
                     if settings.hold_mode == "attach" else {})
    left = built.left_to_slurm
    for attached in snap.jobs:
        if (attached.pending and attached.reservation in own and in_partitions(attached, built.partitions)
                and attached.job_id not in left and attach_wanted.get(attached.job_id) != attached.reservation):
            early.append(Action("detach", attached.job_id, reservation=attached.reservation, reason="hold gone or moved"))
    # pins the daemon set that the plan no longer wants (a job now held by exclusion loses its
    # pin in the same update as it gets the exclusion, so it is never free to start elsewhere)
    ordered = set(desired.order)
    unpin_late: set[str] = set()
    for job_id, pin in owned_pins.items():
        job = jobs.get(job_id)
        if job is None or not job.pending or tuple(job.required_nodes) != tuple(pin) or job_id in left:
            continue
        if desired.pins.get(job_id) is None:
            if job_id in desired.exclusions and job_id in ordered:
                unpin_late.add(job_id)
            else:
                early.append(Action("unpin", job_id, nodes=tuple(pin), reason="no longer planned to start"))
    # hold exclusions the daemon set that the plan no longer wants (a job about to be pinned
    # loses its exclusion in the same update, so it is never free to start elsewhere)
    unexclude_late: set[str] = set()
    for job_id, exc in built.own_exclusions.items():
        job = jobs.get(job_id)
        if job is None or not job.pending or job_id in desired.exclusions or job_id in left:
            continue
        if job_id in desired.pins:
            unexclude_late.add(job_id)
        else:
            early.append(Action("unexclude", job_id, nodes=exc, reason="no longer held"))

    # reservations the daemon no longer wants
    detaching = {a.job_id for a in early if a.kind == "detach"}
    for name, r in own.items():
        spec = desired.holds.get(name)
        users = [j for j in snap.jobs if j.reservation == name and (j.pending or j.active)]
        if spec is not None:
            continue
        if any(j.active for j in users):
            if _ends_later(r, now):
                resv.append(Action("reservation_end", reservation=name, value=END_SOON,
                                   reason="its job runs inside; deleted once it ends"))
            continue
        waiting = [j for j in users if j.pending and j.job_id not in detaching]
        if any(j.job_id in left for j in waiting) and _ends_later(r, now):
            resv.append(Action("reservation_end", reservation=name, value=END_SOON,
                               reason="its job is left to Slurm; Slurm unlinks it when it ends"))
            continue
        if waiting:
            continue  # cannot delete yet (a job we may not detach); retried next cycle
        resv.append(Action("reservation_delete", reservation=name, reason="no hold wants it"))
    # reservations the daemon wants
    ttl_min = max(1, math.ceil(settings.reservation_ttl / 60))
    deleting = {a.reservation for a in resv if a.kind == "reservation_delete"}
    staying = {n: set(r.nodes) for n, r in own.items() if n not in deleting}
    not_yet: set[str] = set()  # new holds on nodes a reservation of ours still covers
    for name, spec in desired.holds.items():
        held = own.get(name)
        if name in foreign:
            continue  # someone else's reservation carries this name: never touched
        if held is None and any(set(spec.nodes) & nodes for other, nodes in staying.items() if other != name):
            # one that ends soon (its job runs, or is left to Slurm): Slurm would refuse the
            # overlap; created once that one is gone, a cycle or two later
            not_yet.add(name)
            continue
        if held is None:
            resv.append(Action("reservation_create", spec.job_id, reservation=name, value=str(ttl_min), nodes=spec.nodes,
                               users=spec.users, ignore_jobs=spec.ignore_jobs, reason="hold"))
            continue
        if tuple(sorted(held.nodes)) != tuple(sorted(spec.nodes)):
            flag = spec.ignore_jobs and "IGNORE_JOBS" not in held.flags
            resv.append(Action("reservation_update", spec.job_id, reservation=name, nodes=spec.nodes,
                               ignore_jobs=flag, reason="held nodes changed"))
        if tuple(sorted(held.users)) != tuple(sorted(spec.users)):
            resv.append(Action("reservation_update", spec.job_id, reservation=name, users=spec.users, reason="users"))
        if held.end_time is not None and held.end_time - now < settings.reservation_ttl / 2:
            start = held.start_time if held.start_time is not None else now
            minutes = max(1, math.ceil((now + settings.reservation_ttl - start) / 60))
            resv.append(Action("reservation_update", spec.job_id, reservation=name, value=str(minutes), reason="renew lease"))

    # per job: attach, pin, priority (highest first)
    late: list[Action] = []
    current = {j: jobs[j].priority for j in desired.order if j in jobs}
    new_prio = assign_priorities(desired.order, current, settings)
    for job_id in desired.order:
        job = jobs.get(job_id)
        if job is None:
            continue
        want_resv = attach_wanted.get(job_id)
        if want_resv and want_resv not in not_yet and job.reservation != want_resv:
            late.append(Action("attach", job_id, reservation=want_resv, reason="hold"))
        if job_id in unexclude_late:  # first: a node list inside the old exclusion is refused
            late.append(Action("unexclude", job_id, nodes=built.own_exclusions[job_id], reason="starts now"))
        wanted_pin = desired.pins.get(job_id)
        if wanted_pin is not None and tuple(job.required_nodes) != tuple(wanted_pin):
            late.append(Action("pin", job_id, nodes=wanted_pin, reason="planned start"))
        if job_id in unpin_late:
            late.append(Action("unpin", job_id, nodes=owned_pins[job_id], reason="held instead"))
        wanted_exc = desired.exclusions.get(job_id)
        if wanted_exc is not None and tuple(job.excluded_nodes) != wanted_exc:
            late.append(Action("exclude", job_id, nodes=wanted_exc, reason="held nodes"))
        if job_id in new_prio and new_prio[job_id] != job.priority:
            late.append(Action("priority", job_id, value=str(new_prio[job_id]), reason="plan order"))
    return early + resv + late


def _ends_later(r: SlurmReservation, now: float) -> bool:
    """Whether ending ``r`` soon changes anything: it is active and not already ending
    within the minute (a reservation not yet started cannot be given an end before it)."""
    return r.active(now) and (r.end_time is None or r.end_time > now + 60)


# ---- running the actions ---------------------------------------------------------------------


@dataclass
class Outcome:
    action: Action
    ok: bool
    error: str = ""
    argv: tuple[str, ...] = ()
    seconds: float = 0.0
    dry_run: bool = False
    #: failed because the job left the queue after the snapshot (Slurm started it at a pass
    #: or it was cancelled or ended): a race no cycle can avoid, not a fault (`overtaken`)
    overtaken: bool = False

    @property
    def unregistered(self) -> bool:
        """Refused until slurmdbd has registered the job (daemon/unregistered.py): the job
        is left to Slurm from the next cycle on; not a fault of the plan."""
        return not self.ok and not self.overtaken and refused_for_db_index(self.error)


def overtaken(outcomes: Sequence[Outcome], pending_now: Callable[[str], bool]) -> list[Outcome]:
    """``outcomes`` with each failed job update marked ``overtaken`` when its job is no
    longer pending (``pending_now``, read after the updates): Slurm refuses to re-pin or
    re-order a job that has just started ("Invalid node name specified" for the
    ``ReqNodeList`` of a running job) or ended, and the next cycle plans without it."""
    return [replace(o, overtaken=True) if not o.ok and o.action.kind in JOB_KINDS and o.action.job_id
            and not pending_now(o.action.job_id) else o for o in outcomes]


def execute(actions: Sequence[Action], backend: Backend, *, dry_run: bool = False) -> list[Outcome]:
    """Run the actions in order (job updates in batches, each job's updates merged into one
    ``scontrol update``). Never raises for a failed action: each gets its ``Outcome``.

    Once slurmctld stops answering, the remaining actions are not sent (each would wait
    out ``command_timeout``): they fail as "not sent" and the next cycle plans afresh."""
    if dry_run:
        return [Outcome(a, True, dry_run=True) for a in actions]
    out: list[Outcome] = []
    i = 0
    while i < len(actions):
        before = len(out)
        if actions[i].kind in JOB_KINDS:
            j = i
            while j < len(actions) and actions[j].kind in JOB_KINDS:
                j += 1
            out.extend(_run_job_updates(actions[i:j], backend))
        else:
            out.append(_run_reservation(actions[i], backend))
        i = len(out)
        if i < len(actions) and _controller_gone(out[before:]):
            out.extend(Outcome(a, False, NOT_SENT) for a in actions[i:])
            break
    return out


def _controller_gone(outcomes: Sequence[Outcome]) -> bool:
    return any(not o.ok and controller_gone(o.error) for o in outcomes)


def _job_fields(a: Action) -> tuple[tuple[str, str], ...]:
    if a.kind == "priority":
        return (("Priority", a.value),)
    if a.kind == "pin":
        return (("ReqNodeList", ",".join(a.nodes)),)
    if a.kind == "unpin":
        return (("ReqNodeList", ""),)
    if a.kind == "exclude":
        return (("ExcNodeList", ",".join(a.nodes)),)
    if a.kind == "unexclude":
        return (("ExcNodeList", ""),)
    if a.kind == "attach":
        return (("ReservationName", a.reservation),)
    if a.kind == "detach":
        return (("ReservationName", ""),)
    raise ValueError(a.kind)


def _run_job_updates(actions: Sequence[Action], backend: Backend) -> list[Outcome]:
    # merge consecutive actions of one job into one update (pin + priority atomically)
    groups: list[list[Action]] = []
    for a in actions:
        if groups and groups[-1][0].job_id == a.job_id and not any(x.kind == a.kind for x in groups[-1]):
            groups[-1].append(a)
        else:
            groups.append([a])
    updates: list[JobUpdate] = []
    out: list[Outcome] = []
    valid_groups: list[list[Action]] = []
    for g in groups:
        try:
            updates.append(JobUpdate(g[0].job_id, tuple(f for a in g for f in _job_fields(a))))
            valid_groups.append(g)
        except ValueError as e:
            out.extend(Outcome(a, False, f"refused: {e}") for a in g)
    results: list[CommandResult] = backend.update_jobs(updates) if updates else []
    for g, r in zip(valid_groups, results):
        out.extend(Outcome(a, r.ok, r.error, r.argv, r.seconds / len(g)) for a in g)
    return out


def _run_reservation(a: Action, backend: Backend) -> Outcome:
    t0 = time.monotonic()
    try:
        if a.kind == "reservation_create":
            r = backend.create_reservation(a.reservation, a.nodes, a.users, int(a.value), a.ignore_jobs)
            if not r.ok and not a.ignore_jobs and "busy" in r.stderr.lower():
                r = backend.create_reservation(a.reservation, a.nodes, a.users, int(a.value), True)
        elif a.kind == "reservation_update":
            fields: dict[str, str] = {}
            if a.nodes:
                fields["Nodes"] = ",".join(a.nodes)
            if a.users:
                fields["Users"] = ",".join(a.users)
            if a.value:
                fields["Duration"] = a.value
            if a.ignore_jobs:
                fields["Flags"] = "IGNORE_JOBS"
            r = backend.update_reservation(a.reservation, **fields)
        elif a.kind == "reservation_end":
            r = backend.update_reservation(a.reservation, EndTime=a.value or END_SOON)
        elif a.kind == "reservation_delete":
            r = backend.delete_reservation(a.reservation)
        else:
            raise ValueError(f"unknown action {a.kind}")
    except ValueError as e:
        return Outcome(a, False, f"refused: {e}", seconds=time.monotonic() - t0)
    return Outcome(a, r.ok, r.error, r.argv, r.seconds)


# ---- hand back -------------------------------------------------------------------------------


def hand_back_actions(snap: Snapshot, settings: Settings, partitions: Iterable[str],
                      owned_pins: Mapping[str, tuple[str, ...]], own: Mapping[str, SlurmReservation],
                      *, priorities: bool = True,
                      owned_exclusions: Mapping[str, tuple[str, ...]] | None = None,
                      left_to_slurm: Collection[str] = ()) -> tuple[list[Action], list[str]]:
    """What returns control to Slurm: unpin the daemon's pins, detach managed jobs from its
    own reservations and delete them (end those a job runs in), and give its priorities back
    to priority/multifactor (hold + release: Slurm's documented way to reset an admin-set
    priority; skipped when ``priorities`` is false). Returns (job and reservation actions,
    job ids to hold and release).

    Jobs Slurm will not let anyone update now (``left_to_slurm``, daemon/unregistered.py)
    are named in no job action, as in a cycle (each would wait 5 s and be refused); a
    reservation one of them waits in is ended rather than deleted (Slurm refuses to delete
    it while a job waits in it, and unlinks the job when it ends)."""
    parts = tuple(partitions)
    left = frozenset(left_to_slurm)
    actions: list[Action] = []
    for job in snap.jobs:
        if not job.pending or job.job_id in left:
            continue
        if job.reservation in own and in_partitions(job, parts):
            actions.append(Action("detach", job.job_id, reservation=job.reservation, reason="hand back"))
        pin = owned_pins.get(job.job_id)
        if pin and tuple(job.required_nodes) == tuple(pin):
            actions.append(Action("unpin", job.job_id, nodes=tuple(pin), reason="hand back"))
        exc = (owned_exclusions or {}).get(job.job_id)
        if exc and tuple(job.excluded_nodes) == tuple(exc):
            actions.append(Action("unexclude", job.job_id, nodes=tuple(exc), reason="hand back"))
    for r in snap.reservations:
        if r.name not in own:
            continue
        if any(j.reservation == r.name and (j.active or (j.pending and j.job_id in left)) for j in snap.jobs):
            actions.append(Action("reservation_end", reservation=r.name, value=END_SOON, reason="hand back"))
        else:
            actions.append(Action("reservation_delete", reservation=r.name, reason="hand back"))
    if not priorities:
        return actions, []
    reset = [j.job_id for j in snap.jobs if j.pending and not j.held and in_partitions(j, parts)
             and settings.in_band(j.priority) and j.job_id not in left]
    return actions, reset
