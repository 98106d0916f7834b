"""One cycle: Slurm snapshot -> ``ClusterState`` -> policy -> plan -> Slurm actions.

``Engine`` holds what lives across cycles (backend, topology, policy, journal, metrics) and
runs ``run_cycle()``; the service calls it on a timer, ``attentived start --once`` calls it
once. Each cycle gets an id that is bound to every log line it writes and keys its rows in
the journal. A cycle never raises: Slurm errors, parse errors and policy errors end that
cycle with ``ok=False`` (logged, counted, journaled), and consecutive failures back off
(up to ``backoff_max``) so that a dead slurmctld is not hammered.
"""

from __future__ import annotations

import json
import os
import secrets
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attentived.agents.plan import Plan
from attentived.agents.policy import Policy
from attentived.agents.registry import make_policy, unsupported
from attentived.topology import Topology, TopologyParseError

from . import log as dlog
from .apply import (
    Action,
    Outcome,
    Settings,
    desired_state,
    execute,
    hand_back_actions,
    plan_actions,
)
from .backend import Backend
from .checks import check_slurm_config
from .config import Config, is_learned
from .connect import make_backend
from .journal import Journal
from .notify import Notifier
from .prom import Metrics
from .records import (
    SlurmCommandError,
    SlurmError,
    SlurmParseError,
    SlurmUnavailable,
    Snapshot,
)
from .snapshot import Built, build_state
from .topology_source import TopologySource, TopologySourceError, load_topology


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

    @property
    def updates(self) -> int:
        """Slurm changes this cycle made (0 in dry-run)."""
        return sum(1 for o in self.outcomes if not o.dry_run)

    @property
    def failed(self) -> int:
        return sum(1 for o in self.outcomes if not o.ok)


def new_cycle_id(seq: int) -> str:
    return f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{seq:04d}-{secrets.token_hex(2)}"


def load_policy(cfg: Config) -> tuple[Policy, str, str]:
    """(policy, its name, why the configured one was not used or "")."""
    try:
        model = (cfg.model or None) if is_learned(cfg.policy) else None
        return make_policy(cfg.policy, seed=cfg.seed, model=model), cfg.policy, ""
    except Exception as e:  # a corrupt model, a missing module: fall back, say so
        return make_policy(cfg.fallback_policy, seed=cfg.seed), cfg.fallback_policy, f"{cfg.policy}: {e}"


class Engine:
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
        self._policy_override = policy
        self.policy: Policy | None = policy
        self.policy_name = getattr(policy, "name", "") if policy else ""
        self.policy_fallback = ""
        self.partitions: tuple[str, ...] = config.partitions
        self.slurm_findings: list[Any] = []
        self.setup_done = False
        self.seq = 0
        self.failures = 0
        self.backoff_until = 0.0
        self.last: CycleResult | None = None
        self.started_at = time.time()
        self.errors_total = 0
        self._lock = threading.RLock()
        self._known_active: set[str] = set()
        self._last_managed: set[str] = set()
        self._planned: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {}
        # Shadow mode (``attentived start --shadow``): plan and journal beside Slurm's own
        # scheduler, change nothing, and record what Slurm does (ops/shadow.py).
        self.shadow = False
        self._observer: Any = None
        self._load_policy()

    # ---- configuration ------------------------------------------------------------------
    @property
    def mode(self) -> str:
        return "shadow" if self.shadow else ("dry-run" if self.config.dry_run else "live")

    @property
    def settings(self) -> Settings:
        return Settings.from_config(self.config)

    def _load_policy(self) -> None:
        if self._policy_override is not None:
            return
        self.policy, self.policy_name, self.policy_fallback = load_policy(self.config)
        if self.policy_fallback:
            self._fell_back()
        elif self.config.model and not is_learned(self.config.policy):
            self.log.warning("config.model_unused", policy=self.config.policy, model=self.config.model)
        self._policy_metric()

    def _fell_back(self) -> None:
        self.log.error("policy.fallback", configured=self.config.policy, using=self.policy_name,
                       reason=self.policy_fallback)
        self.metrics.errors.inc(kind="policy")

    def _policy_metric(self) -> None:
        self.metrics.policy.clear()
        self.metrics.policy.set(1, policy=self.policy_name, fallback="1" if self.policy_fallback else "0")

    def _check_policy_fits(self) -> None:
        """A policy that cannot schedule this cluster (a fixed-size network on a larger one)
        is replaced by the fallback, as a model that does not load is."""
        reason = unsupported(self.policy, self.topology) if self.policy is not None and self.topology is not None else None
        if reason:
            self.policy_fallback = f"{self.policy_name}: {reason}"
            self.policy_name = self.config.fallback_policy
            self.policy = make_policy(self.config.fallback_policy, seed=self.config.seed)
            self._fell_back()
            self._policy_metric()

    def reload(self, config: Config) -> None:
        """Swap in a validated config between cycles (waits for a running cycle)."""
        with self._lock:
            old = self.config
            self.config = config
            if (config.backend, config.slurm_conf, config.command_timeout, config.slurm_bin_dir) != (
                    old.backend, old.slurm_conf, old.command_timeout, old.slurm_bin_dir):
                self.backend = make_backend(config.backend, slurm_conf=config.slurm_conf or None,
                                            timeout=config.command_timeout, bin_dir=config.slurm_bin_dir or None)
            if (config.policy, config.model, config.seed, config.fallback_policy) != (
                    old.policy, old.model, old.seed, old.fallback_policy):
                self._load_policy()
            if (config.cluster_file, config.gres_conf, config.topology_conf) != (
                    old.cluster_file, old.gres_conf, old.topology_conf) and self._fixed_topology is None:
                self.topology = None
            self.partitions = config.partitions
            self.setup_done = False  # re-resolve partitions, re-check Slurm settings
            self.journal.max_rows, self.journal.max_plans = config.journal_max_rows, config.journal_max_plans

    def setup(self) -> None:
        """What needs Slurm once: settings check, default partition, topology."""
        if self.setup_done:
            return
        conf: dict[str, str] = {}
        try:
            conf = self.backend.config()
        except SlurmError as e:
            self.log.warning("slurm.config_unreadable", error=str(e))
        if conf:
            self.slurm_findings = check_slurm_config(conf, priority_floor=self.config.priority_floor)
            for f in self.slurm_findings:
                getattr(self.log, "warning" if f.level != "info" else "info")(
                    "slurm.setting", key=f.key, level_found=f.level, message=f.message)
        if not self.config.partitions:
            default = self.backend.default_partition()
            if not default:
                raise SlurmError("no partitions configured and Slurm has no default partition: set 'partitions'")
            self.partitions = (default,)
            self.log.info("partitions.default", partitions=list(self.partitions))
        if self._fixed_topology is None and (self.topology is None or (self.topology_source and self.topology_source.changed())):
            self.topology, self.topology_source = load_topology(
                cluster_file=self.config.cluster_file, gres_conf=self.config.gres_conf,
                topology_conf=self.config.topology_conf, slurm_config=conf, slurm_conf=self.config.slurm_conf)
            self.log.info("topology.loaded", source=self.topology_source.kind, paths=list(self.topology_source.paths),
                          nodes=len(self.topology.nodes), gpus=self.topology.num_gpus)
        self._check_policy_fits()
        self.setup_done = True

    def permission_problem(self) -> str:
        """Start-up probe for live mode: "" or why Slurm will refuse the daemon's writes
        (``checks.operator_problem``). Read-only; skipped for backends without commands
        (the in-memory Slurm) and when Slurm cannot be asked (the cycles will say so)."""
        run = getattr(self.backend, "run", None)
        if run is None or self.config.dry_run or self.shadow:
            return ""
        import pwd

        from .checks import operator_problem

        uid = os.geteuid()
        try:
            user = pwd.getpwuid(uid).pw_name
        except KeyError:
            user = str(uid)
        try:
            conf = self.backend.config()
        except SlurmError as e:
            self.log.warning("startup.permission_probe_skipped", error=str(e))
            return ""
        slurm_user = conf.get("SlurmUser", "")
        if uid == 0 or slurm_user.split("(")[0].strip() == user:
            return ""
        level: str | None = None
        try:
            proc = run(["sacctmgr", "-n", "-P", "show", "user", user, "format=AdminLevel"], check=False)
            if proc.returncode == 0 and proc.stdout.strip():
                level = proc.stdout.strip().splitlines()[0]
        except SlurmError:
            level = None
        return operator_problem(user, uid, slurm_user, conf.get("AccountingStorageType", ""), level)

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
                    self.log.info("cycle.skipped", reason="backing off", seconds_left=round(self.backoff_until - time.monotonic(), 1))
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
        owned = self.journal.pins()  # read in dry runs too: the daemon's pins are not the user's
        built = build_state(snap, self.topology, self.partitions, reservation_prefix=self.config.reservation_prefix,
                            owned_pins=owned)
        for w in built.warnings[:20]:
            self.log.warning("snapshot.warning", message=w)
        self._track_starts(snap, built, res)
        res.counts = dict(built.counts, free_gpus=built.state.num_free)
        if self.shadow:
            self._observe(snap, built, res)

        t = time.monotonic()
        plan = self._decide(built)
        res.plan = plan
        res.timings["decide"] = time.monotonic() - t

        t = time.monotonic()
        settings = self.settings
        desired = desired_state(plan, built, settings)
        actions = plan_actions(desired, built, settings, owned)
        res.actions = actions
        res.plan_doc = self._plan_doc(plan, built, desired)
        self.log.info("cycle.plan", policy=self.policy_name, pending=len(built.state.pending),
                      running=len(built.state.running), free_gpus=built.state.num_free,
                      order=list(plan.order[:20]), starts=res.plan_doc["starts"][:20], holds=res.plan_doc["holds"],
                      waited=plan.waited, notes=desired.notes[:10], actions=len(actions), dry_run=res.dry_run)
        if not res.dry_run:
            self._record_pin_intents(actions, res.cycle_id)
        res.outcomes = execute(actions, self.backend, dry_run=res.dry_run)
        if not res.dry_run:
            self._settle_pins(res.outcomes, owned, snap)
            for job_id, gpus in desired.starts.items():
                names, nodes = built.gpu_names(gpus), built.nodes_of(gpus)
                self._planned[job_id] = (names, nodes)
                self.journal.record_planned(res.cycle_id, job_id, names, nodes)
        self._last_managed = set(built.managed)
        res.timings["apply"] = time.monotonic() - t
        for o in res.outcomes:
            level = "info" if o.ok else "error"
            getattr(self.log, level)("slurm.action", kind=o.action.kind, job=o.action.job_id or None,
                                     reservation=o.action.reservation or None, value=o.action.value or None,
                                     nodes=list(o.action.nodes) or None, ok=o.ok, error=o.error or None,
                                     dry_run=o.dry_run, reason=o.action.reason)

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

    def _decide(self, built: Built) -> Plan:
        assert self.policy is not None
        try:
            return self.policy.decide(built.state)
        except Exception as e:
            self.metrics.errors.inc(kind="policy")
            fallback = make_policy(self.config.fallback_policy, seed=self.config.seed)
            self.log.error("policy.error", policy=self.policy_name, error=f"{type(e).__name__}: {e}",
                           using=self.config.fallback_policy)
            return fallback.decide(built.state)

    def _plan_doc(self, plan: Plan, built: Built, desired: Any) -> dict[str, Any]:
        prefix = self.config.reservation_prefix
        return {
            "policy": self.policy_name,
            "now": built.state.now,
            "partitions": list(self.partitions),
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

    # ---- pins and placements ------------------------------------------------------------
    def _record_pin_intents(self, actions: list[Action], cycle_id: str) -> None:
        for a in actions:
            if a.kind == "pin":
                self.journal.set_pin(a.job_id, a.nodes, cycle_id)

    def _settle_pins(self, outcomes: list[Outcome], owned: dict[str, tuple[str, ...]], snap: Snapshot) -> None:
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

    def _track_starts(self, snap: Snapshot, built: Built, res: CycleResult) -> None:
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
            if not res.dry_run:
                self.journal.record_started(jid, nodes, names, match, job.start_time)
            self.log.info("job.started", job=jid, nodes=list(nodes), gpus=list(names), match=match,
                          planned=list(planned[jid][0]) if jid in planned else None)

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
                delay = min(self.config.backoff_max, self.config.interval * 2 ** min(self.failures - 1, 20)) - self.config.interval
                self.backoff_until = time.monotonic() + max(0.0, delay)
        m.cycle_duration.observe(res.duration)
        m.cycles.inc(result="ok" if res.ok else "error")
        for phase in ("snapshot", "decide", "apply"):
            if phase in res.timings:
                m.phase.set(res.timings[phase], phase=phase)
        for o in res.outcomes:
            m.actions.inc(kind=o.action.kind, result="dry_run" if o.dry_run else ("ok" if o.ok else "failed"))
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
                outcomes=[{**o.action.as_dict(), "argv": o.argv, "ok": o.ok, "error": o.error, "dry_run": o.dry_run}
                          for o in res.outcomes],
            )
            self.journal.rotate()
        except Exception as e:  # a full disk must not stop scheduling
            m.errors.inc(kind="journal")
            self.log.error("journal.error", error=f"{type(e).__name__}: {e}")
        self.last = res
        self.write_status()
        self.log.info("cycle.done", ok=res.ok, seconds=round(res.duration, 4), actions=len(res.outcomes),
                      failed=res.failed, dry_run=res.dry_run, error=res.error or None,
                      timings={k: round(v, 4) for k, v in res.timings.items()})

    def status(self) -> dict[str, Any]:
        last = self.last
        return {
            "pid": os.getpid(),
            "started_at": self.started_at,
            "mode": self.mode,
            "policy": self.policy_name,
            "policy_configured": self.config.policy,
            "policy_fallback": self.policy_fallback or None,
            "model": self.config.model or None,
            "partitions": list(self.partitions),
            "interval": self.config.interval,
            "config": self.config.source,
            "hold_mode": self.config.hold_mode,
            "slurm_reachable": bool(last and last.snapshot_ok),
            "slurm_findings": [f.__dict__ for f in self.slurm_findings],
            "errors_total": self.errors_total,
            "last_cycle": None if last is None else {
                "id": last.cycle_id, "started": last.started, "duration": last.duration, "ok": last.ok,
                "skipped": last.skipped, "dry_run": last.dry_run, "error": last.error or None,
                "actions": len(last.outcomes), "failed": last.failed, "counts": last.counts,
            },
            "updated": time.time(),
        }

    def write_status(self) -> None:
        path = Path(self.config.state_dir) / "status.json"
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".json.tmp")
            tmp.write_text(json.dumps(self.status(), indent=1))
            tmp.replace(path)
        except OSError as e:
            self.log.warning("status.unwritable", path=str(path), error=str(e))

    # ---- hand back ----------------------------------------------------------------------
    def hand_back(self) -> list[Outcome]:
        """Give Slurm back control: the daemon's pins, reservations and priorities go."""
        with self._lock, dlog.bind_cycle(f"handback-{new_cycle_id(self.seq + 1)}"):
            try:
                self.setup()
                snap = self.backend.snapshot()
            except Exception as e:  # Slurm down, topology unreadable: nothing to hand back now
                self.log.error("handback.failed", error=f"{type(e).__name__}: {e}")
                return []
            owned = self.journal.pins()
            actions, reset = hand_back_actions(snap, self.settings, self.partitions, owned)
            outcomes = execute(actions, self.backend)
            if reset:
                for chunk in range(0, len(reset), 200):
                    ids = reset[chunk : chunk + 200]
                    for kind, fn in (("hold", self.backend.hold), ("release", self.backend.release)):
                        r = fn(ids)
                        outcomes.append(Outcome(Action(kind, ",".join(ids), reason="hand back priorities"), r.ok, r.error, r.argv))
            self.journal.drop_pins([a.job_id for a in actions if a.kind == "unpin"])
            for o in outcomes:
                self.log.info("handback.action", kind=o.action.kind, job=o.action.job_id or None,
                              reservation=o.action.reservation or None, ok=o.ok, error=o.error or None)
            try:
                self.journal.record_cycle(
                    f"handback-{self.seq}-{secrets.token_hex(2)}", started=time.time(), duration=0.0,
                    policy=self.policy_name, mode="hand-back", status="ok" if all(o.ok for o in outcomes) else "apply",
                    actions=len(outcomes), failed=sum(1 for o in outcomes if not o.ok),
                    outcomes=[{**o.action.as_dict(), "argv": o.argv, "ok": o.ok, "error": o.error} for o in outcomes])
            except Exception:
                pass
            return outcomes
