"""One cycle: Slurm snapshot -> ``ClusterState`` -> policy -> plan -> Slurm actions.

``CycleRunner`` holds what lives across cycles (backend, topology, journal, metrics) and
runs ``run_cycle()``; the service calls it on a timer, ``attentived start --once`` calls it
once. Each cycle gets an id that is bound to every log line it writes and keys its rows in
the journal. A cycle never raises: Slurm errors, parse errors and policy errors end that
cycle with ``ok=False`` (logged, counted, journaled), and consecutive failures back off
(up to ``backoff_max``) so that a dead slurmctld is not hammered.

The runner only sequences; each piece with a job of its own lives beside it:
``policy_slot`` (which policy decides, and the fallback), ``placements`` (the daemon's pins
and planned vs actual starts), ``status`` (``status.json``), ``handback`` (giving Slurm
back control on exit) and ``permissions`` (the start-up probe for operator rights).
"""

from __future__ import annotations

import secrets
import threading
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from attentived.agents.plan import Plan
from attentived.agents.policy import Policy
from attentived.topology import Topology, TopologyParseError

from . import log as dlog
from .accounting import AccountingWatch
from .apply import JOB_KINDS, Action, Desired, Outcome, Settings, desired_state, execute, overtaken, plan_actions
from .backend import Backend
from .chain import chain_holds
from .checks import check_slurm_config
from .config import Config
from .connect import make_backend
from .handback import hand_back, release_partitions
from .idle import IdleWatch
from .job_defaults import JobDefaults
from .journal import Journal
from .notify import Notifier
from .ownership import ReservationBook
from .permissions import permission_problem
from .placements import PlacementTracker
from .policy_slot import PolicySlot
from .prom import Metrics
from .records import (
    SlurmCommandError,
    SlurmError,
    SlurmParseError,
    SlurmPartition,
    SlurmUnavailable,
    Snapshot,
    default_partition,
    job_number,
)
from .snapshot import Built, build_state, own_reservations
from .stability import previous_placements, stabilize
from .status import status_doc
from .status import write_status as write_status_file
from .topology_source import TopologySource, TopologySourceError, load_topology
from .unregistered import Unregistered

#: Seconds of decision after which the cycle reads Slurm back before applying.
READ_BACK_AFTER = 0.5
#: Seconds between reads of what slurmctld gives a job beyond its request (``scontrol show
#: config``, ``scontrol -a -o show partition``): an operator's ``scontrol reconfigure`` or
#: ``scontrol update PartitionName=...`` reaches the plan within this, without a reload;
#: meanwhile a start slurmctld refuses for it is caught as a stall.
SLURM_DEFAULTS_REFRESH = 300.0


@dataclass
class CycleResult:
    cycle_id: str
    started: float
    ok: bool = False
    skipped: bool = False
    dry_run: bool = False
    duration: float = 0.0
    error: str = ""
    error_kind: str = ""
    snapshot_ok: bool = False
    timings: dict[str, float] = field(default_factory=dict)
    plan: Plan | None = None
    plan_doc: dict[str, Any] | None = None
    actions: list[Action] = field(default_factory=list)
    outcomes: list[Outcome] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    idle_with_queue: float = 0.0

    @property
    def updates(self) -> int:
        """Slurm changes this cycle made (0 in dry-run)."""
        return sum(1 for o in self.outcomes if not o.dry_run)

    @property
    def failed(self) -> int:
        """Updates Slurm refused, less those whose job had left the queue (`overtaken`) and
        those of jobs slurmdbd has not registered yet (`unregistered`)."""
        return sum(1 for o in self.outcomes if not o.ok and not o.overtaken and not o.unregistered)

    @property
    def overtaken(self) -> int:
        return sum(1 for o in self.outcomes if o.overtaken)

    @property
    def unregistered(self) -> int:
        return sum(1 for o in self.outcomes if o.unregistered)


def new_cycle_id(seq: int) -> str:
    return f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{seq:04d}-{secrets.token_hex(2)}"


def plan_doc(plan: Plan, built: Built, desired: Desired, *, policy_name: str, partitions: Sequence[str],
             reservation_prefix: str) -> dict[str, Any]:
    """The plan as the journal keeps it: GPU names and nodes, not dense ids."""
    prefix = reservation_prefix
    return {
        "policy": policy_name,
        "now": built.state.now,
        "partitions": list(partitions),
        "order": list(plan.order),
        "priority_order": list(desired.order),
        "starts": [{"job": s.job_id, "gpus": list(built.gpu_names(s.gpus)), "nodes": list(built.nodes_of(s.gpus)),
                    "pinned": s.job_id in desired.pins} for s in plan.starts],
        "holds": [{"job": h.job_id, "gpus": list(built.gpu_names(h.gpus)), "nodes": list(built.nodes_of(h.gpus)),
                   "expected_start": h.expected_start,
                   "reservation": prefix + h.job_id if prefix + h.job_id in desired.holds else None}
                  for h in plan.holds],
        "waited": plan.waited,
        "notes": desired.notes,
        "counts": dict(built.counts),
        "free_gpus": built.state.num_free,
        "unusable_nodes": built.node_reasons,
    }


class CycleRunner:
    """The daemon's state across cycles and the order of one cycle's steps."""

    def __init__(self, config: Config, *, backend: Backend | None = None, journal: Journal | None = None,
                 metrics: Metrics | None = None, notifier: Notifier | None = None,
                 topology: Topology | None = None, policy: Policy | None = None) -> None:
        self.config = config
        self.backend = backend or make_backend(config.backend, slurm_conf=config.slurm_conf or None,
                                               timeout=config.command_timeout, bin_dir=config.slurm_bin_dir or None)
        self.journal = journal if journal is not None else Journal.in_state_dir(
            config.state_dir, max_rows=config.journal_max_rows, max_plans=config.journal_max_plans)
        self.metrics = metrics or Metrics()
        self.notifier = notifier or Notifier(address="")
        self.log = dlog.get()
        self._fixed_topology = topology
        self.topology: Topology | None = topology
        self.topology_source: TopologySource | None = None
        self.partitions: tuple[str, ...] = config.partitions
        self.slurm_findings: list[Any] = []
        self.job_defaults = JobDefaults()  # what slurmctld allocates beyond what squeue shows
        self._config_read = False
        self._config_read_at = 0.0  # time.monotonic() of the last read that answered
        self._partitions_seen: tuple[SlurmPartition, ...] = ()  # the last listing that answered
        self.setup_done = False
        self.seq = 0
        self.failures = 0
        self.backoff_until = 0.0
        self.last: CycleResult | None = None
        self.started_at = time.time()
        self.errors_total = 0
        self._lock = threading.RLock()
        self.placements = PlacementTracker(self.journal, self.metrics, self.log)
        self.reservations = ReservationBook(self.journal)
        self._previous: dict[str, tuple[int, ...]] = {}  # last live plan's placements (stability)
        self._applied: tuple[str, ...] = ()  # the partitions of the last live cycle: its priorities are in Slurm
        self._dropped_from: tuple[str, ...] = ()  # partitions managed live before a reload, until handed back
        self._to_release: set[str] = set()  # jobs the daemon held to reset a priority and could not release yet
        self.idle = IdleWatch()
        self.unregistered = Unregistered(retry=config.backoff_max)  # jobs Slurm will not let us update yet
        # Shadow mode (``attentived start --shadow``): plan and journal beside Slurm's own
        # scheduler, change nothing, and record what Slurm does (ops/shadow.py).
        self.shadow = False
        self._observer: Any = None
        self.policy_slot = PolicySlot(config, self.metrics, self.log, fixed=policy)
        self.accounting = AccountingWatch(config.accounting_check_interval, self.log)

    # ---- configuration ------------------------------------------------------------------
    @property
    def mode(self) -> str:
        return "shadow" if self.shadow else ("dry-run" if self.config.dry_run else "live")

    @property
    def settings(self) -> Settings:
        return Settings.from_config(self.config)

    @property
    def policy(self) -> Policy | None:
        return self.policy_slot.policy

    @property
    def policy_name(self) -> str:
        return self.policy_slot.name

    @property
    def policy_fallback(self) -> str:
        return self.policy_slot.fallback

    def reload(self, config: Config) -> None:
        """Swap in a validated config between cycles (waits for a running cycle)."""
        with self._lock:
            old = self.config
            self.config = config
            if (config.backend, config.slurm_conf, config.command_timeout, config.slurm_bin_dir) != (
                    old.backend, old.slurm_conf, old.command_timeout, old.slurm_bin_dir):
                self.backend = make_backend(config.backend, slurm_conf=config.slurm_conf or None,
                                            timeout=config.command_timeout, bin_dir=config.slurm_bin_dir or None)
            self.policy_slot.reload(config)
            if (config.cluster_file, config.gres_conf, config.topology_conf) != (
                    old.cluster_file, old.gres_conf, old.topology_conf) and self._fixed_topology is None:
                self.topology = None
            if config.partitions != old.partitions or not config.partitions:
                self._dropped_from = tuple(dict.fromkeys((*self._dropped_from, *self._applied)))
            self.partitions = config.partitions
            self.unregistered.retry = config.backoff_max
            self.setup_done = False  # re-resolve partitions, re-check Slurm settings
            self.journal.max_rows, self.journal.max_plans = config.journal_max_rows, config.journal_max_plans

    def setup(self) -> None:
        """What needs Slurm once: settings check, default partition, topology."""
        if self.setup_done:
            if not self._config_read or time.monotonic() - self._config_read_at >= SLURM_DEFAULTS_REFRESH:
                self._read_config(quiet=True)  # unknown until it reads; then read again now and then
            return
        conf, parts = self._read_config()
        if conf:
            self.accounting.configure(conf.get("AccountingStorageType", ""), self.config.accounting_check_interval)
            self.slurm_findings = check_slurm_config(conf, priority_floor=self.config.priority_floor,
                                                     command_timeout=self.config.command_timeout)
            for f in self.slurm_findings:
                getattr(self.log, "warning" if f.level != "info" else "info")(
                    "slurm.setting", key=f.key, level_found=f.level, message=f.message)
        if not self.config.partitions:
            default = default_partition(parts if parts is not None else self.backend.partitions())
            if not default:
                raise SlurmError("no partitions configured and Slurm has no default partition: set 'partitions'")
            self.partitions = (default,)
            self.log.info("partitions.default", partitions=list(self.partitions))
        if self._fixed_topology is None and (self.topology is None or (self.topology_source and self.topology_source.changed())):
            self.topology, self.topology_source = load_topology(
                cluster_file=self.config.cluster_file, gres_conf=self.config.gres_conf,
                topology_conf=self.config.topology_conf, slurm_config=conf, slurm_conf=self.config.slurm_conf)
            self.log.info("topology.loaded", source=self.topology_source.kind, paths=list(self.topology_source.paths),
                          nodes=len(self.topology.nodes), gpus=self.topology.num_gpus,
                          blocks=len(self.topology.blocks.names) if self.topology.blocks else 0)
            if self.topology_source.note:
                self.log.warning("topology.not_modelled", paths=list(self.topology_source.paths),
                                 note=self.topology_source.note)
            self._previous = {}  # GPU ids of the topology before: the next plan starts afresh
        self.policy_slot.check_fits(self.topology)
        if self.topology is not None:
            self.policy_slot.warm_up(self.topology)
        self.setup_done = True

    def _read_config(self, quiet: bool = False) -> tuple[dict[str, str], tuple[SlurmPartition, ...] | None]:
        """``scontrol show config`` and the partitions, and from them `JobDefaults` (kept as
        they were when either cannot be read; `setup` tries again every cycle until both can,
        and again every `SLURM_DEFAULTS_REFRESH` seconds)."""
        conf: dict[str, str] = {}
        parts = None
        try:
            conf = self.backend.config()
            parts = self.backend.partitions()
        except SlurmError as e:
            if not quiet:
                self.log.warning("slurm.config_unreadable", error=str(e))
        if conf:  # without a listing, the cluster's settings and the partitions last listed
            self._partitions_seen = parts if parts is not None else self._partitions_seen
            defaults = JobDefaults.of(conf, self._partitions_seen)
            if self._config_read and defaults != self.job_defaults:
                self.log.info("slurm.job_defaults_changed", before=repr(self.job_defaults), now=repr(defaults))
            self.job_defaults = defaults
        self._config_read = bool(conf) and parts is not None
        if self._config_read:
            self._config_read_at = time.monotonic()
        return conf, parts

    def permission_problem(self) -> str:
        """Start-up probe for live mode: "" or why Slurm will refuse the daemon's writes
        (``daemon/permissions.py``)."""
        return permission_problem(self.backend, self.config, shadow=self.shadow, log=self.log)

    # ---- the cycle ----------------------------------------------------------------------
    def run_cycle(self, dry_run: bool | None = None) -> CycleResult:
        with self._lock:
            self.seq += 1
            res = CycleResult(new_cycle_id(self.seq), time.time(),
                              dry_run=self.shadow or (self.config.dry_run if dry_run is None else dry_run))
            with dlog.bind_cycle(res.cycle_id):
                if time.monotonic() < self.backoff_until:
                    res.skipped = True
                    self.metrics.cycles.inc(result="skipped")
                    self.log.info("cycle.skipped", reason="backing off",
                                  seconds_left=round(self.backoff_until - time.monotonic(), 1))
                    return res
                t0 = time.monotonic()
                try:
                    self._run(res)
                    res.ok = res.failed == 0
                    if res.failed:
                        res.error_kind, res.error = "apply", f"{res.failed} action(s) failed"
                except SlurmParseError as e:
                    self._fail(res, "parse", str(e))
                except (SlurmCommandError, SlurmUnavailable, SlurmError) as e:
                    self._fail(res, "slurm", str(e))
                except (TopologyParseError, TopologySourceError) as e:
                    self._fail(res, "topology", str(e))
                except Exception as e:  # never let one cycle kill the daemon
                    self._fail(res, "internal", f"{type(e).__name__}: {e}")
                    self.log.error("cycle.crash", traceback=traceback.format_exc())
                res.duration = time.monotonic() - t0
                self._finish(res)
                return res

    def _fail(self, res: CycleResult, kind: str, message: str) -> None:
        res.error_kind, res.error = kind, message
        self.metrics.errors.inc(kind=kind)
        self.log.error("cycle.error", kind=kind, error=message)

    def _run(self, res: CycleResult) -> None:
        t = time.monotonic()
        self.setup()
        snap = self.backend.snapshot()
        res.snapshot_ok = True
        self.metrics.up.set(1)
        res.timings["snapshot"] = time.monotonic() - t
        res.timings.update({f"snapshot_{k}": v for k, v in snap.timings.items()})
        assert self.topology is not None
        if not res.dry_run:
            self._probe_unregistered(snap, res)
            if self._dropped_from or self._to_release:
                self._release_dropped(snap)
        # A slow decision (a model's first call, a large queue) sees a Slurm that has moved
        # on: read it back once, and decide again on the fresh picture if jobs started or
        # ended meanwhile, rather than send actions about a past state.
        stale = 0
        for attempt in (0, 1):
            t = time.monotonic()
            owned, built = self._build(snap, res)
            res.timings["state"] = time.monotonic() - t
            t = time.monotonic()
            plan = self.policy_slot.decide(built.state)
            res.timings["decide"] = time.monotonic() - t
            if attempt or res.timings["decide"] < READ_BACK_AFTER:
                break
            t = time.monotonic()
            fresh = self.backend.read_back(snap, self.partitions)
            res.timings["read_back"] = time.monotonic() - t
            if fresh is None:
                break
            self.log.info("cycle.stale", decide_seconds=round(res.timings["decide"], 3),
                          action="decide again on a fresh snapshot")
            stale, snap = 1, fresh
        if stale:
            res.counts["stale_replans"] = stale
        self.placements.track_starts(snap, built, res.dry_run)
        if self.shadow:
            self._observe(snap, built, res)
        if self.config.hold_mode == "block":
            plan = chain_holds(plan, built.state, self.config.hold_depth)
        plan = stabilize(plan, built.state, self._previous, self.config.stability_margin)
        res.plan = plan

        t = time.monotonic()
        settings = self.settings
        desired = desired_state(plan, built, settings)
        actions = plan_actions(desired, built, settings, owned)
        res.actions = actions
        res.plan_doc = plan_doc(plan, built, desired, policy_name=self.policy_name, partitions=self.partitions,
                                reservation_prefix=self.config.reservation_prefix)
        res.plan_doc["stalls"] = [st.as_dict() for st in self.placements.stalls()]
        res.plan_doc["idle_with_queue_s"] = self._note_idle(built, res)
        self.log.info("cycle.plan", policy=self.policy_name, pending=len(built.state.pending),
                      running=len(built.state.running), free_gpus=built.state.num_free,
                      order=list(plan.order[:20]), starts=res.plan_doc["starts"][:20], holds=res.plan_doc["holds"],
                      waited=plan.waited, notes=desired.notes[:10], actions=len(actions), dry_run=res.dry_run)
        if not res.dry_run:
            self.placements.record_pin_intents(actions, res.cycle_id)
            self.reservations.record_intents(actions, snap.taken_at)
        res.outcomes = execute(actions, self.backend, dry_run=res.dry_run)
        if not res.dry_run:
            readback = self._read_back(res.outcomes)
            if readback is not None:
                res.outcomes = overtaken(res.outcomes, lambda j: (job := readback.job(j)) is not None
                                         and job.state == "PENDING")
            new = self.unregistered.note([o.action.job_id for o in res.outcomes if o.unregistered], time.monotonic())
            if new:
                self.log.warning("slurm.unregistered", jobs=new, retry_seconds=self.unregistered.retry,
                                 message="Slurm refuses updates of these jobs until slurmdbd has registered them; "
                                         "they are left to Slurm and asked again every retry_seconds. After a "
                                         "slurmctld crash, Slurm before 24.11 keeps refusing until the job starts.")
            self.placements.settle_pins(res.outcomes, owned, snap, readback)
            self.reservations.settle(res.outcomes)
            self.placements.record_planned(res.cycle_id, {j: g for j, g in desired.starts.items() if j in desired.pins},
                                           built,
                                           holds={h.job_id: tuple(h.gpus) for h in plan.holds if h.job_id in desired.exclusions})
            self._previous = previous_placements(plan)
            self._applied = self.partitions
        self.placements.note_managed(built)
        res.timings["apply"] = time.monotonic() - t
        for o in res.outcomes:
            level = "info" if o.ok or o.overtaken else "warning" if o.unregistered else "error"
            getattr(self.log, level)("slurm.action", kind=o.action.kind, job=o.action.job_id or None,
                                     reservation=o.action.reservation or None, value=o.action.value or None,
                                     nodes=list(o.action.nodes) or None, ok=o.ok, error=o.error or None,
                                     overtaken=o.overtaken or None, unregistered=o.unregistered or None,
                                     dry_run=o.dry_run, reason=o.action.reason)

    def _release_dropped(self, snap: Snapshot) -> None:
        """After a reload that dropped partitions, give their pending jobs back to Slurm
        (``handback.release_partitions``), kept to retry while an update fails; and release
        the jobs a reset left held (Slurm took the hold, then refused every release)."""
        jobs = snap.jobs_by_id
        still = sorted((j for j in self._to_release if j in jobs and jobs[j].pending and jobs[j].held), key=job_number)
        self._to_release = set(still)
        if still:
            r = self.backend.release(still)
            getattr(self.log, "info" if r.ok else "error")("partitions.released", kind="release", job=",".join(still),
                                                            ok=r.ok, error=r.error or None)
            if r.ok:
                self._to_release.clear()
        if not self._dropped_from:
            return
        own = own_reservations(snap, self.reservations.owned(snap), self.config.reservation_prefix)
        outcomes, held = release_partitions(snap, self._dropped_from, self.partitions, backend=self.backend,
                                            settings=self.settings, own=own, left_to_slurm=self.unregistered.leave_out())
        self._to_release.update(held)
        for o in outcomes:
            getattr(self.log, "info" if o.ok else "error")(
                "partitions.released", kind=o.action.kind, job=o.action.job_id, ok=o.ok, error=o.error or None,
                partitions=[p for p in self._dropped_from if p not in self.partitions])
        if all(o.ok for o in outcomes if o.action.kind != "release") and not held:
            self._dropped_from = ()

    def _probe_unregistered(self, snap: Snapshot, res: CycleResult) -> None:
        """Jobs Slurm refused to update until slurmdbd registers them: forget those that
        left the queue, and ask Slurm again about the rest when due (daemon/unregistered.py)."""
        gone = self.unregistered.forget_gone(j.job_id for j in snap.jobs if j.pending)
        taken: list[str] = []
        t = time.monotonic()
        if self.unregistered.due(t):
            taken = self.unregistered.probe(self.backend, snap.jobs_by_id, t)
            res.timings["probe"] = time.monotonic() - t
        if gone or taken:
            self.log.info("slurm.registered", jobs=taken or None, left_queue=gone or None,
                          still_refused=sorted(self.unregistered.since) or None)

    def _build(self, snap: Snapshot, res: CycleResult) -> tuple[dict[str, tuple[str, ...]], Built]:
        """The daemon's pins, and the state the policy sees, from one snapshot."""
        assert self.topology is not None
        if not res.dry_run:
            self.placements.find_stalls(snap, self.config.stall_avoid, self.config.pin_max_age)
        owned = self.journal.pins()  # read in dry runs too: the daemon's pins are not the user's
        built = build_state(snap, self.topology, self.partitions, reservation_prefix=self.config.reservation_prefix,
                            owned_pins=owned, owned_reservations=self.reservations.owned(snap),
                            owned_exclusions=self.journal.exclusions(),
                            avoid=self.placements.avoid(), leave_to_slurm=self.unregistered.leave_out(),
                            defaults=self.job_defaults)
        for w in built.warnings[:20]:
            self.log.warning("snapshot.warning", message=w)
        res.counts = dict(built.counts, free_gpus=built.state.num_free)
        return owned, built

    def _read_back(self, outcomes: Sequence[Outcome]) -> Snapshot | None:
        """After a failed job update, what Slurm really kept (it may apply part of an
        update) and whether the job is still pending (`overtaken`)."""
        if all(o.ok or o.action.kind not in JOB_KINDS for o in outcomes):
            return None
        try:
            return self.backend.snapshot()
        except SlurmError as e:
            self.log.warning("readback.failed", error=str(e))
            return None

    def _note_idle(self, built: Built, res: CycleResult) -> float:
        """Seconds for which some managed job has fit on idle GPUs without starting."""
        fitting, seconds = self.idle.note(built.state)
        res.counts["fitting_now"] = fitting
        res.idle_with_queue = seconds
        self.metrics.idle_with_queue.set(seconds)
        return seconds

    def _observe(self, snap: Snapshot, built: Built, res: CycleResult) -> None:
        """Shadow mode: record arrivals, starts and ends as Slurm made them."""
        try:
            if self._observer is None:
                from .observe import Observer

                self._observer = Observer.in_state_dir(self.config.state_dir, max_rows=self.config.journal_max_rows)
            changed = self._observer.observe(snap, built, res.cycle_id)
            res.counts["observed_changes"] = changed
        except Exception as e:  # observations are best effort: the plan still gets journaled
            self.metrics.errors.inc(kind="journal")
            self.log.error("shadow.observe_failed", error=f"{type(e).__name__}: {e}")

    # ---- after each cycle ---------------------------------------------------------------
    def _finish(self, res: CycleResult) -> None:
        m = self.metrics
        if res.ok:
            self.failures = 0
            self.backoff_until = 0.0
        else:
            self.errors_total += 1
            if not res.snapshot_ok:
                m.up.set(0)
            if res.error_kind != "apply":
                self.failures += 1
                interval = self.config.interval
                delay = min(self.config.backoff_max, interval * 2 ** min(self.failures - 1, 20)) - interval
                self.backoff_until = time.monotonic() + max(0.0, delay)
        m.cycle_duration.observe(res.duration)
        m.cycles.inc(result="ok" if res.ok else "error")
        for phase in ("snapshot", "state", "decide", "apply"):
            if phase in res.timings:
                m.phase.set(res.timings[phase], phase=phase)
        for o in res.outcomes:
            m.actions.inc(kind=o.action.kind, result="dry_run" if o.dry_run else
                          ("ok" if o.ok else "overtaken" if o.overtaken else
                           "unregistered" if o.unregistered else "failed"))
        if res.counts:
            m.queue.set(res.counts.get("managed", 0))
            m.pending.set(res.counts.get("pending", 0))
            m.running.set(res.counts.get("running", 0))
            m.free_gpus.set(res.counts.get("free_gpus", 0))
        if res.plan_doc is not None:
            m.holds.set(sum(1 for h in res.plan_doc["holds"] if h["reservation"]))
        m.last_cycle.set(time.time())
        m.dry_run.set(1 if res.dry_run else 0)
        try:
            self.journal.record_cycle(
                res.cycle_id, started=res.started, duration=res.duration, policy=self.policy_name,
                mode="shadow" if self.shadow else ("dry-run" if res.dry_run else "live"),
                status="ok" if res.ok else res.error_kind or "error",
                error=res.error, pending=res.counts.get("managed", 0), running=res.counts.get("running", 0),
                actions=len(res.outcomes), failed=res.failed, timings=res.timings, plan=res.plan_doc,
                outcomes=[{**o.action.as_dict(), "argv": o.argv, "ok": o.ok, "error": o.error, "dry_run": o.dry_run,
                           "overtaken": o.overtaken, "unregistered": o.unregistered} for o in res.outcomes],
            )
            self.journal.rotate()
        except Exception as e:  # a full disk must not stop scheduling
            m.errors.inc(kind="journal")
            self.log.error("journal.error", error=f"{type(e).__name__}: {e}")
        self.last = res
        self._check_accounting()
        self.write_status()
        level = "info" if res.ok or res.skipped else "warning"
        getattr(self.log, level)("cycle.done", ok=res.ok, seconds=round(res.duration, 4), actions=len(res.outcomes),
                      failed=res.failed, overtaken=res.overtaken or None, unregistered=res.unregistered or None,
                      dry_run=res.dry_run, error=res.error or None,
                      timings={k: round(v, 4) for k, v in res.timings.items()})

    def _check_accounting(self) -> None:
        """slurmdbd's health, when due (``daemon/accounting.py``): named, never fatal."""
        self.accounting.check(getattr(self.backend, "run", None))
        health = self.accounting.health
        if health is None:
            self.metrics.accounting_up.clear()
        else:
            self.metrics.accounting_up.set(1 if health.reachable else 0)

    # ---- status -------------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        """The status document (``daemon/status.py``)."""
        return status_doc(config=self.config, mode=self.mode, policy_name=self.policy_name,
                          policy_fallback=self.policy_fallback, partitions=self.partitions,
                          slurm_findings=self.slurm_findings, errors_total=self.errors_total,
                          started_at=self.started_at, last=self.last, accounting=self.accounting)

    def write_status(self) -> None:
        """``<state_dir>/status.json``, replaced atomically."""
        write_status_file(self.config.state_dir, self.status(), self.log)

    # ---- hand back ----------------------------------------------------------------------
    def hand_back(self, pins_only: bool = False) -> list[Outcome]:
        """Give Slurm back control: the daemon's pins, reservations and priorities go, or
        only its pins (``daemon/handback.py``)."""
        with self._lock, dlog.bind_cycle(f"handback-{new_cycle_id(self.seq + 1)}"):
            try:
                self.setup()
                snap = self.backend.snapshot()
            except Exception as e:  # Slurm down, topology unreadable: nothing to hand back now
                self.log.error("handback.failed", error=f"{type(e).__name__}: {e}")
                return []
            partitions = tuple(dict.fromkeys((*self.partitions, *self._dropped_from)))  # a reload's not yet handed back
            return hand_back(snap, backend=self.backend, journal=self.journal, settings=self.settings,
                             partitions=partitions, policy_name=self.policy_name, seq=self.seq, log=self.log,
                             pins_only=pins_only, left_to_slurm=self.unregistered.leave_out())
