"""What the inspection commands read: the daemon's state directory and the live Slurm.

Every function here returns plain, JSON-ready data (``--json`` prints it as is; the tables in
``attentived/render_ops.py`` draw it) and raises ``InspectError`` with an exit code and one
clear sentence when it cannot answer:

==== =====================================================================================
code meaning
==== =====================================================================================
0    answered (an empty queue is an answer)
1    could not answer: Slurm unreachable, no state directory or journal, unknown job
2    bad input: invalid config file, malformed option value or job id
3    ``attentived status`` only: the daemon is not running (LSB ``status`` convention)
==== =====================================================================================

Nothing here writes: the journal is opened read-only (``Journal.open_readonly``), the state
directory is never created, and Slurm is only read (``squeue``, ``sinfo``, ``scontrol
show``, ``scontrol ping``).

- ``daemon_state``: is the daemon alive? ``<state_dir>/status.json`` is the service's
  heartbeat (rewritten after every cycle with its pid, mode, policy, partitions, last cycle);
  the daemon runs when that pid is alive and is an attentived process; the heartbeat is
  *stale* when older than ``max(3 x interval, backoff_max + interval)``.
- ``status``: the daemon, its mode/policy/partitions, the last cycle, recent errors and a
  live ``scontrol ping``.
- ``connect`` → ``Live``: one Slurm snapshot turned into the same ``ClusterState`` the
  daemon builds (same topology source, same partitions), for ``queue``, ``explain`` and
  ``topology --slurm``.
- ``queue``: the pending managed jobs in the order the configured policy plans them now,
  with the policy's score, the planned GPUs, an expected start projected from time
  limits, and Slurm's own view: its priority order and ``squeue --start`` estimate.
- ``decisions``: cycles, actions and (for one job) its rank in each plan, from the journal.
- ``topology_live`` and ``config_check``.
"""

from __future__ import annotations

import heapq
import json
import math
import os
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from attentived.agents.plan import Plan
from attentived.agents.policy import Policy
from attentived.agents.state import ClusterState, PendingJob
from attentived.daemon import config as cfgmod
from attentived.daemon.backend import Backend
from attentived.daemon.checks import check_slurm_config, keeps_accounting
from attentived.daemon.connect import make_backend
from attentived.daemon.job_defaults import JobDefaults
from attentived.daemon.journal import Journal
from attentived.daemon.records import SlurmError, SlurmJob, SlurmPartition, Snapshot, default_partition, job_number
from attentived.daemon.snapshot import Built, build_state
from attentived.daemon.topology_source import TopologySourceError, load_topology
from attentived.topology import Topology, TopologyParseError

EXIT_OK, EXIT_ERROR, EXIT_BAD_INPUT, EXIT_NOT_RUNNING = 0, 1, 2, 3


class InspectError(Exception):
    """A question that cannot be answered; ``code`` is the exit status."""

    def __init__(self, message: str, code: int = EXIT_ERROR) -> None:
        super().__init__(message)
        self.code = code


# ---- config, journal, Slurm -----------------------------------------------------------------


def load_config(path: str | os.PathLike[str] | None) -> cfgmod.Config:
    """The config (``None``: the default file when it exists, else the defaults)."""
    try:
        return cfgmod.load(None if path is None else Path(path))
    except cfgmod.ConfigError as e:
        raise InspectError(str(e), EXIT_BAD_INPUT) from None


def open_backend(cfg: cfgmod.Config) -> Backend:
    """The Slurm backend the daemon uses (tests replace this with an in-memory Slurm)."""
    return make_backend(cfg.backend, slurm_conf=cfg.slurm_conf or None, timeout=cfg.command_timeout,
                        bin_dir=cfg.slurm_bin_dir or None)


def state_dir_of(cfg: cfgmod.Config) -> Path:
    return Path(cfg.state_dir)


def open_journal(cfg: cfgmod.Config, *, required: bool = True) -> Journal | None:
    """The daemon's journal, read-only; ``InspectError`` (or ``None`` when not ``required``)
    when the state directory or the journal is missing."""
    sd = state_dir_of(cfg)
    if not sd.is_dir():
        if not required:
            return None
        raise InspectError(f"state directory {sd} does not exist: the daemon has never run with this config "
                           f"({cfg.source}), or state_dir points elsewhere")
    try:
        return Journal.open_readonly(sd / "journal.sqlite")
    except FileNotFoundError:
        if not required:
            return None
        raise InspectError(f"{sd / 'journal.sqlite'}: no decision journal yet: the daemon has not finished a cycle "
                           "with this state directory") from None
    except Exception as e:  # unreadable (permissions, corrupt)
        if not required:
            return None
        raise InspectError(f"{sd / 'journal.sqlite'}: cannot read the journal: {e}") from None


def parse_time(text: str, now: float | None = None) -> float:
    """``--since``/``--until`` values: ``30m``/``2h``/``1d``/``90s`` ago, an ISO date and time
    (``2026-11-29T22:00``, local time), ``now``, or Unix seconds. ``ValueError`` otherwise."""
    now = time.time() if now is None else now
    t = text.strip()
    if t == "now":
        return now
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([smhdw])", t)
    if m:
        return now - float(m.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}[m.group(2)]
    if re.fullmatch(r"\d+(?:\.\d+)?", t):
        return float(t)
    try:
        return datetime.fromisoformat(t.replace(" ", "T")).timestamp()
    except ValueError:
        raise ValueError(f"{text!r} is not a time: use 30m, 2h, 1d (ago), 2026-11-29T22:00 or Unix seconds") from None


# ---- is the daemon alive? ---------------------------------------------------------------------


def _pid_is_attentived(pid: int) -> tuple[bool, str]:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False, f"process {pid} is gone"
    except PermissionError:
        pass  # exists, belongs to another user (the service user): alive
    except OSError as e:
        return False, f"process {pid}: {e}"
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return True, ""  # no /proc: trust the pid
    if b"attentived" not in cmdline:
        prog = cmdline.split(b"\0")[0].decode(errors="replace")
        return False, f"pid {pid} now belongs to another program ({prog})"
    return True, ""


def daemon_state(cfg: cfgmod.Config, now: float | None = None) -> dict[str, Any]:
    """The daemon's heartbeat (``<state_dir>/status.json``) and whether its process lives."""
    now = time.time() if now is None else now
    sd = state_dir_of(cfg)
    path = sd / "status.json"
    out: dict[str, Any] = {"state_dir": str(sd), "state_dir_exists": sd.is_dir(), "status_file": str(path),
                           "running": False, "pid": None, "reason": "", "heartbeat": None, "heartbeat_age": None,
                           "stale": False, "status": None}
    if not sd.is_dir():
        out["reason"] = f"state directory {sd} does not exist"
        return out
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        out["reason"] = f"no {path.name} in {sd}: the daemon has not finished a cycle here"
        return out
    except (OSError, ValueError) as e:
        out["reason"] = f"{path}: unreadable: {e}"
        return out
    out["status"] = doc
    pid = doc.get("pid")
    out["pid"] = pid
    out["heartbeat"] = doc.get("updated")
    if isinstance(doc.get("updated"), (int, float)):
        out["heartbeat_age"] = max(0.0, now - doc["updated"])
    alive, why = _pid_is_attentived(int(pid)) if isinstance(pid, int) and pid > 0 else (False, "no pid recorded")
    out["running"] = alive
    if not alive:
        out["reason"] = f"{why} (last heartbeat {_ago(out['heartbeat_age'])})"
    else:
        interval = float(doc.get("interval") or cfg.interval)
        limit = max(3 * interval, cfg.backoff_max + interval)
        if out["heartbeat_age"] is not None and out["heartbeat_age"] > limit:
            out["stale"] = True
            out["reason"] = (f"running (pid {pid}) but no cycle for {_ago(out['heartbeat_age'])}: "
                             "a cycle may be stuck (systemd's watchdog restarts it)")
    return out


def _ago(seconds: float | None) -> str:
    if seconds is None:
        return "unknown"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f}{unit} ago"
    return f"{seconds:.0f}s ago"


def slurm_probe(cfg: cfgmod.Config, backend: Backend | None = None) -> dict[str, Any]:
    """Is slurmctld answering? (``scontrol ping``; other backends: one snapshot)."""
    out: dict[str, Any] = {"reachable": False, "version": None, "error": None, "controller": None}
    try:
        backend = backend or open_backend(cfg)
        run = getattr(backend, "run", None)
        if run is not None:
            proc = run(["scontrol", "ping"], check=False)
            text = " ".join((proc.stdout or "").split())
            out["controller"] = text or None
            out["reachable"] = proc.returncode == 0 and " is UP" in text
            if not out["reachable"]:
                out["error"] = text or " ".join((proc.stderr or "").split()) or f"scontrol ping exit {proc.returncode}"
        else:
            backend.snapshot()
            out["reachable"] = True
        out["version"] = str(backend.version())
    except (SlurmError, OSError, ValueError) as e:
        out["error"] = str(e)
    return out


def status(cfg: cfgmod.Config, *, backend: Backend | None = None, probe: bool = True) -> dict[str, Any]:
    """``attentived status``: see the module docstring."""
    d = daemon_state(cfg)
    doc = d.get("status") or {}
    journal = open_journal(cfg, required=False)
    errors: list[dict[str, Any]] = []
    last_ok = None
    counts: dict[str, int] = {}
    if journal is not None:
        try:
            recent = journal.cycles_between(since=time.time() - 86400, limit=500)
            errors = [{"cycle_id": c["cycle_id"], "started": c["started"], "status": c["status"], "error": c["error"]}
                      for c in recent if c["status"] not in ("ok",)][:10]
            last_ok = next((c["started"] for c in recent if c["status"] == "ok"), None)
            counts = journal.counts()
        finally:
            journal.close()
    last = doc.get("last_cycle")
    slurm = slurm_probe(cfg, backend) if probe else {"reachable": None}
    partitions = doc.get("partitions") or list(cfg.partitions)
    return {
        "config": cfg.source,
        "daemon": {k: d[k] for k in ("running", "pid", "reason", "stale", "heartbeat", "heartbeat_age", "state_dir",
                                     "state_dir_exists")},
        "started_at": doc.get("started_at"),
        "mode": doc.get("mode") or ("dry-run" if cfg.dry_run else "live"),
        "policy": doc.get("policy") or cfg.policy,
        "policy_configured": doc.get("policy_configured") or cfg.policy,
        "policy_fallback": doc.get("policy_fallback"),
        "model": doc.get("model") or (cfg.model or ("shipped model" if cfgmod.is_learned(cfg.policy) else None)),
        "interval": doc.get("interval") or cfg.interval,
        "hold_mode": doc.get("hold_mode") or cfg.hold_mode,
        "partitions": partitions,
        "last_cycle": last,
        "last_ok_cycle": last_ok,
        "errors_total": doc.get("errors_total", 0),
        "recent_errors": errors,
        "slurm": slurm,
        "accounting": doc.get("accounting"),
        "slurm_findings": doc.get("slurm_findings", []),
        "warnings": doc.get("warnings", []),
        "journal": counts,
        "from_config_only": not doc,
    }


# ---- the live view ------------------------------------------------------------------------------


@dataclass
class Live:
    """One Slurm snapshot as the daemon sees it."""

    config: cfgmod.Config
    backend: Backend
    slurm_config: dict[str, str]
    job_defaults: JobDefaults  # what slurmctld allocates a job beyond what squeue shows
    partitions: tuple[str, ...]
    topology: Topology
    topology_source: str
    snap: Snapshot
    built: Built

    @property
    def state(self) -> ClusterState:
        return self.built.state


def connect(cfg: cfgmod.Config, *, backend: Backend | None = None, topology: Topology | None = None,
            owned_pins: dict[str, tuple[str, ...]] | None = None) -> Live:
    """Read Slurm once and build the daemon's ``ClusterState`` (its topology source, its
    partitions, its own pins as recorded in the journal)."""
    try:
        backend = backend or open_backend(cfg)
        try:
            conf = backend.config()
        except SlurmError:
            conf = {}
        try:
            parts: tuple[SlurmPartition, ...] | None = backend.partitions()
        except SlurmError:
            parts = None  # what each partition gives its jobs stays unknown, as the config's
        partitions = tuple(cfg.partitions)
        if not partitions:
            default = default_partition(parts if parts is not None else backend.partitions())
            if not default:
                raise InspectError("no partitions configured and Slurm has no default partition: set 'partitions'")
            partitions = (default,)
        if topology is None:
            topology, src = load_topology(cluster_file=cfg.cluster_file, gres_conf=cfg.gres_conf,
                                          topology_conf=cfg.topology_conf, slurm_config=conf,
                                          slurm_conf=cfg.slurm_conf)
            source = f"{src.kind}: {', '.join(src.paths)}"
        else:
            source = "given"
        snap = backend.snapshot()
    except (TopologySourceError, TopologyParseError) as e:
        raise InspectError(f"topology: {e}") from None
    except SlurmError as e:
        raise InspectError(f"Slurm is not reachable: {e}") from None
    owned_reservations: dict[str, Any] = {}
    journal = open_journal(cfg, required=False)
    if journal is not None:
        try:
            owned_pins = journal.pins() if owned_pins is None else owned_pins
            owned_reservations = journal.reservations()
        finally:
            journal.close()
    defaults = JobDefaults.of(conf, parts or ())
    built = build_state(snap, topology, partitions, reservation_prefix=cfg.reservation_prefix, owned_pins=owned_pins or {},
                        owned_reservations=owned_reservations, defaults=defaults)
    return Live(cfg, backend, conf, defaults, partitions, topology, source, snap, built)


def policy_for(cfg: cfgmod.Config) -> tuple[Policy, str, str]:
    """The policy the daemon would run (``attentive`` loads its model; a policy that cannot
    load falls back as in the daemon): (policy, name, why it fell back or "")."""
    from attentived.daemon.policy_slot import load_policy

    return load_policy(cfg)


# ---- scores and projections ---------------------------------------------------------------------


def _fmt_s(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "unlimited"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if abs(seconds) >= size:
            return f"{seconds / size:.1f}{unit}"
    return f"{seconds:.0f}s"


def scores(policy: Policy, state: ClusterState) -> dict[str, tuple[float | None, str]]:
    """What the policy ranks each pending job by: (value, label). Learned agent: the job
    agent's probability of picking the job now (jobs that cannot start now have none)."""
    from attentived.agents import order as orders

    out: dict[str, tuple[float | None, str]] = {}
    pending = list(state.pending)
    if not pending:
        return out
    if hasattr(policy, "explain") and hasattr(policy, "encoder"):
        exp = policy.explain(state, k=len(pending) + 1)
        for opt in exp.top_jobs:
            if opt.job_id:
                out[opt.job_id] = (opt.probability, f"p={opt.probability:.3f}")
        return out
    chooser = getattr(policy, "chooser", None)
    q = state.queue
    if isinstance(chooser, orders.Fifo):
        for j in pending:
            w = j.waited(state.now)
            out[j.job_id] = (w, f"waited {_fmt_s(w)}")
    elif isinstance(chooser, orders.ShortestJobFirst):
        est = orders.estimated_runtimes(state)
        for j, e in zip(pending, est):
            out[j.job_id] = (float(e), f"est. run {_fmt_s(float(e))}")
    elif isinstance(chooser, orders.FairShare):
        served = state.attained_service
        for j in pending:
            s = served.get(j.user, 0.0)
            out[j.job_id] = (s, f"{j.user} served {s / 3600:.2f} GPU-h")
    elif isinstance(chooser, orders.Tiresias):
        est = orders.estimated_runtimes(state)
        level = np.searchsorted(np.asarray(chooser.thresholds), q.gpus * est, side="right")
        for j, lv, e in zip(pending, level, est):
            starving = math.isfinite(e) and state.now - j.submit_time > chooser.starvation_factor * e
            out[j.job_id] = (float(0 if starving else lv), f"LAS queue {0 if starving else int(lv)}"
                             + (" (starving)" if starving else ""))
    elif isinstance(chooser, orders.SlurmMultifactor):
        prio = chooser.priorities(state)
        for j in pending:
            out[j.job_id] = (prio[j.job_id], f"priority {int(prio[j.job_id])}")
    return out


def placer_of(policy: Policy) -> Any:
    from attentived.agents.placement import Consolidate

    return getattr(policy, "placer", None) or Consolidate()


def project(plan: Plan, state: ClusterState, placer: Any, max_jobs: int = 300,
            masks: dict[str, np.ndarray] | None = None) -> dict[str, tuple[float, tuple[int, ...]]]:
    """Expected start and GPUs of each planned job: the plan's starts now, its holds as
    planned, the rest in plan order (strictly, as ``sched/builtin``) as running and earlier
    jobs reach their time limits. Jobs behind one whose end is unknown (no time limit) get
    no projection. ``masks``: for the job ids it holds as keys, the free GPUs the job had
    to choose from at its (projected) start are filled in."""
    now = state.now
    free = state.free.copy()
    ends: list[tuple[float, int, tuple[int, ...]]] = []
    seq = 0
    for r in state.running:
        end = r.start_time + r.time_limit if r.time_limit is not None else math.inf
        ends.append((max(end, now), seq, r.gpus))
        seq += 1
    heapq.heapify(ends)
    jobs = {j.job_id: j for j in state.pending}
    out: dict[str, tuple[float, tuple[int, ...]]] = {}
    for s in plan.starts:
        if masks is not None and s.job_id in masks:
            masks[s.job_id] = free.copy()
        out[s.job_id] = (now, tuple(s.gpus))
        free[list(s.gpus)] = False
        j = jobs.get(s.job_id)
        lim = j.time_limit if j and j.time_limit is not None else math.inf
        heapq.heappush(ends, (now + lim, seq, tuple(s.gpus)))
        seq += 1
    holds = {h.job_id: h for h in plan.holds}
    t = now
    for n, job_id in enumerate(plan.order):
        if job_id in out or n >= max_jobs:
            continue
        job = jobs.get(job_id)
        if job is None:
            continue
        gpus = None
        while True:
            if int(free.sum()) >= job.num_gpus:
                gpus = placer.place(job, free, state)
                if gpus is not None:
                    break
            if not ends or not math.isfinite(ends[0][0]):
                break
            end, _, g = heapq.heappop(ends)
            free[list(g)] = True
            t = max(t, end)
        if gpus is None:
            if job_id in holds:  # the policy's own estimate (running jobs without a limit may end any time)
                out[job_id] = (max(t, holds[job_id].expected_start), tuple(holds[job_id].gpus))
            break  # unknown from here on
        if masks is not None and job_id in masks:
            masks[job_id] = free.copy()
        if job_id in holds:
            t = max(t, holds[job_id].expected_start)
        out[job_id] = (t, tuple(int(x) for x in gpus))
        free[list(gpus)] = False
        lim = job.time_limit if job.time_limit is not None else math.inf
        heapq.heappush(ends, (t + lim, seq, tuple(int(x) for x in gpus)))
        seq += 1
    return out


def slurm_start_estimates(backend: Backend) -> dict[str, float]:
    """``squeue --start``: Slurm's own expected start of pending jobs (where it has one)."""
    run = getattr(backend, "run", None)
    if run is None:
        return {}
    from attentived.daemon.scontrol_text import slurm_time

    try:
        proc = run(["squeue", "--start", "-h", "-o", "%i|%S"], check=False)
    except SlurmError:
        return {}
    out: dict[str, float] = {}
    for line in (proc.stdout or "").splitlines():
        jid, _, when = line.strip().partition("|")
        try:
            t = slurm_time(when)
        except SlurmError:
            continue
        if jid.isdigit() and t:
            out[jid] = t
    return out


def slurm_order(jobs: Sequence[SlurmJob]) -> list[SlurmJob]:
    """Slurm's own start order for pending jobs: priority, then submit time, then job id."""
    return sorted(jobs, key=lambda j: (-j.priority, j.submit_time or 0.0, job_number(j.job_id)))


def _names(built: Built, gpus: Sequence[int]) -> tuple[list[str], list[str]]:
    return list(built.gpu_names(gpus)), list(built.nodes_of(gpus))


# ---- queue ------------------------------------------------------------------------------------


def queue(cfg: cfgmod.Config, live: Live | None = None, *, limit: int = 200) -> dict[str, Any]:
    """``attentived queue``: see the module docstring."""
    live = live or connect(cfg)
    state, built = live.state, live.built
    policy, name, fallback = policy_for(cfg)
    plan = policy.decide(state)
    score = scores(policy, state)
    proj = project(plan, state, placer_of(policy))
    started = {s.job_id for s in plan.starts}
    held = {h.job_id: h for h in plan.holds}
    slurm_rank = {j.job_id: i + 1 for i, j in enumerate(slurm_order(list(built.managed.values())))}
    estimates = slurm_start_estimates(live.backend)
    d = daemon_state(cfg)
    journal = open_journal(cfg, required=False)
    last_plan = None
    if journal is not None:
        try:
            last_plan = journal.last_plan()
        finally:
            journal.close()
    by_id = {j.job_id: j for j in state.pending}
    rows = []
    for rank, job_id in enumerate(plan.order, start=1):
        if rank > limit:
            break
        j: PendingJob = by_id[job_id]
        sj = built.managed[job_id]
        when, gpus = proj.get(job_id, (None, ()))
        names, nodes = _names(built, gpus) if gpus else ([], [])
        rows.append({
            "rank": rank, "job": job_id, "user": j.user, "gpus": j.num_gpus, "nodes_requested": j.num_nodes,
            "partition": j.partition, "name": sj.name, "submitted": sj.submit_time, "waited": j.waited(state.now),
            "time_limit": j.time_limit,
            "score": score.get(job_id, (None, ""))[0], "score_label": score.get(job_id, (None, "-"))[1],
            "action": "start" if job_id in started else ("hold" if job_id in held else "wait"),
            "planned_nodes": nodes, "planned_gpus": names, "expected_start": when,
            "constrained": job_id in built.constrained,
            "slurm_rank": slurm_rank.get(job_id), "slurm_priority": sj.priority, "slurm_reason": sj.reason,
            "slurm_expected_start": estimates.get(job_id),
        })
    slurm_next = [j.job_id for j in slurm_order(list(built.managed.values()))][:5]
    last = None
    if last_plan:
        order = list(last_plan.get("order") or [])
        last = {"cycle_id": last_plan["cycle_id"], "created": last_plan["created"], "policy": last_plan.get("policy"),
                "same_order": order[: len(plan.order)] == list(plan.order)}
    return {
        "policy": name, "policy_fallback": fallback or None, "computed_at": state.now,
        "partitions": list(live.partitions), "daemon": {"running": d["running"],
                                                         "mode": (d.get("status") or {}).get("mode")},
        "free_gpus": state.num_free, "total_gpus": state.topology.num_gpus, "running_jobs": len(state.running),
        "pending": len(state.pending), "shown": len(rows), "not_managed": {k: built.counts.get(k, 0) for k in
                                                                           ("other_partitions", "ineligible", "no_gpu")},
        "jobs": rows, "slurm_next": slurm_next, "last_plan": last, "waited": plan.waited,
        "note": "expected start: projected from time limits in plan order; slurm rank: Slurm's own order "
                "(priority, submit time, job id); slurm start: squeue --start",
    }


def queue_from_journal(cfg: cfgmod.Config) -> dict[str, Any] | None:
    """The daemon's last plan, for when Slurm cannot be read."""
    journal = open_journal(cfg, required=False)
    if journal is None:
        return None
    try:
        plan = journal.last_plan()
    finally:
        journal.close()
    if not plan:
        return None
    starts = {s["job"]: s for s in plan.get("starts", [])}
    holds = {h["job"]: h for h in plan.get("holds", [])}
    rows = []
    for rank, job_id in enumerate(plan.get("order", []), start=1):
        s = starts.get(job_id) or holds.get(job_id) or {}
        rows.append({"rank": rank, "job": job_id, "action": "start" if job_id in starts else ("hold" if job_id in holds else "wait"),
                     "planned_nodes": s.get("nodes", []), "planned_gpus": s.get("gpus", []),
                     "expected_start": holds.get(job_id, {}).get("expected_start") if job_id in holds else None})
    return {"source": "journal", "cycle_id": plan["cycle_id"], "created": plan["created"], "policy": plan.get("policy"),
            "jobs": rows}


# ---- decisions ----------------------------------------------------------------------------------


def decisions(cfg: cfgmod.Config, *, since: float | None = None, job: str | None = None,
              limit: int = 50) -> dict[str, Any]:
    """``attentived decisions``: cycles and actions (newest first) and, with ``job``, that
    job's placement record and its place in each plan."""
    if job is not None and not re.fullmatch(r"\d{1,12}", job):
        raise InspectError(f"--job {job!r}: not a Slurm job id", EXIT_BAD_INPUT)
    journal = open_journal(cfg)
    assert journal is not None
    try:
        cycles = journal.cycles_between(since=since, limit=limit)
        actions = journal.actions(since=since, job=job, limit=limit + 1)
        more = len(actions) > limit
        actions = actions[:limit]
        out: dict[str, Any] = {
            "since": since, "job": job, "journal": str(journal.path),
            "cycles": [{k: c[k] for k in ("cycle_id", "started", "duration", "policy", "mode", "status", "error",
                                           "pending", "running", "actions", "failed")} for c in cycles],
            "actions": [{"ts": a["ts"], "cycle_id": a["cycle_id"], "kind": a["kind"], "job": a["job_id"],
                         "reservation": a["reservation"], "value": a["value"], "reason": a["reason"],
                         "ok": bool(a["ok"]), "error": a["error"], "dry_run": bool(a["dry_run"]),
                         "argv": json.loads(a["argv"] or "[]")} for a in actions],
            "more_actions": more,
        }
        if job is not None:
            placement = journal.planned([job]).get(job)
            if placement:
                for k in ("planned_gpus", "planned_nodes", "actual_nodes", "actual_gpus"):
                    placement[k] = json.loads(placement[k]) if placement.get(k) else []
            out["placement"] = placement
            history = []
            for p in journal.plans_between(since=since, limit=max(limit, 200)):
                order = p.get("order") or []
                if job not in order:
                    continue
                start = next((s for s in p.get("starts", []) if s["job"] == job), None)
                hold = next((h for h in p.get("holds", []) if h["job"] == job), None)
                history.append({"cycle_id": p["cycle_id"], "created": p["created"], "policy": p.get("policy"),
                                "rank": order.index(job) + 1, "of": len(order),
                                "action": "start" if start else ("hold" if hold else "wait"),
                                "nodes": (start or hold or {}).get("nodes", []),
                                "expected_start": hold.get("expected_start") if hold else None})
                if len(history) >= limit:
                    break
            out["plans"] = history
            if not placement and not history and not actions:
                raise InspectError(f"job {job}: not in the journal (never managed by attentived, or older than the "
                                   "journal keeps)")
        return out
    finally:
        journal.close()


# ---- topology from Slurm -----------------------------------------------------------------------


def topology_live(cfg: cfgmod.Config, live: Live | None = None) -> dict[str, Any]:
    """The daemon's topology with used/free GPUs from one Slurm snapshot."""
    from attentived.topology.describe import as_dict

    live = live or connect(cfg)
    topo, built = live.topology, live.built
    used = np.zeros(topo.num_gpus, dtype=bool)
    for gpus in built.running_gpus.values():
        used[list(gpus)] = True
    doc = as_dict(topo, live.state.free)
    by_node: dict[str, list[dict[str, Any]]] = {}
    for jid, gpus in built.running_gpus.items():
        job = live.snap.job(jid)
        for g in gpus:
            by_node.setdefault(topo.nodes[int(topo.gpu_node[g])].name, []).append(
                {"gpu": int(topo.gpu_local[g]), "job": jid, "user": job.user if job else ""})
    for n in doc["nodes"]:
        n["used"] = sorted({e["gpu"] for e in by_node.get(n["name"], [])})
        n["jobs"] = by_node.get(n["name"], [])
        n["unusable"] = built.node_reasons.get(n["name"])
    doc.update({"source": live.topology_source, "partitions": list(live.partitions),
                "free_gpus": int(live.state.num_free), "used_gpus": int(used.sum()),
                "unusable_nodes": dict(built.node_reasons), "taken_at": live.snap.taken_at})
    return doc


# ---- config check --------------------------------------------------------------------------------


def config_check(path: str | os.PathLike[str] | None, *, slurm: bool = True,
                 backend: Backend | None = None) -> dict[str, Any]:
    """Validate a config file and the Slurm it points at: each check is ok / info /
    warning / error. An invalid file raises ``InspectError`` (exit 2)."""
    checks: list[dict[str, str]] = []

    def add(check: str, level: str, message: str) -> None:
        checks.append({"check": check, "level": level, "message": message})

    if path is not None and not Path(path).exists():
        raise InspectError(f"{path}: no such config file", EXIT_BAD_INPUT)
    cfg = load_config(path)
    add("config", "ok", f"{cfg.source}: valid" if cfg.source != "(defaults)"
        else f"no file at {cfgmod.DEFAULT_PATH}: built-in defaults")
    from attentived.daemon.policy_slot import load_policy

    _policy, name, why = load_policy(cfg)
    if why:
        add("policy", "error", f"policy {cfg.policy!r} cannot be loaded ({why}); the daemon would run {name}")
    else:
        add("policy", "ok", f"{name}" + (f" (model {cfg.model or 'shipped'})" if cfgmod.is_learned(cfg.policy) else ""))
    sd = Path(cfg.state_dir)
    if sd.is_dir():
        add("state_dir", "ok" if os.access(sd, os.W_OK) else "warning",
            f"{sd} exists" + ("" if os.access(sd, os.W_OK) else " but this user cannot write it (the service user must)"))
    else:
        parent = next((p for p in sd.parents if p.exists()), Path("/"))
        add("state_dir", "info" if os.access(parent, os.W_OK) else "warning",
            f"{sd} does not exist yet; the daemon creates it" + ("" if os.access(parent, os.W_OK)
                                                                  else f" (needs write access to {parent}, or systemd's StateDirectory=)"))
    if not slurm:
        return {"file": cfg.source, "ok": not any(c["level"] == "error" for c in checks), "checks": checks,
                "slurm_checked": False}
    try:
        backend = backend or open_backend(cfg)
    except (SlurmError, ValueError) as e:
        add("backend", "error", str(e))
        return {"file": cfg.source, "ok": False, "checks": checks, "slurm_checked": True}
    probe = slurm_probe(cfg, backend)
    if not probe["reachable"]:
        add("slurm", "error", f"slurmctld not reachable: {probe['error']}")
    else:
        add("slurm", "ok", f"Slurm {probe['version']}: {probe['controller'] or 'reachable'}")
    conf: dict[str, str] = {}
    try:
        conf = backend.config()
    except SlurmError as e:
        add("slurm_config", "error", f"scontrol show config: {e}")
    if conf:
        findings = check_slurm_config(conf, priority_floor=cfg.priority_floor,
                                      command_timeout=cfg.command_timeout)
        flagged = {f.key for f in findings}
        for f in findings:
            add(f.key, f.level, f.message)
        for key, want in (("SchedulerType", "sched/builtin"), ("PriorityType", "priority/multifactor"),
                          ("SelectType", "select/cons_tres")):
            if key not in flagged and conf.get(key) == want:
                add(key, "ok", f"{key}={want}")
        if "GresTypes" not in flagged:
            add("GresTypes", "ok", f"GresTypes={conf.get('GresTypes')}")
        acct = conf.get("AccountingStorageType", "")
        comp = conf.get("JobCompType", "")
        if keeps_accounting(acct):
            add("accounting", "ok", f"{acct}: `trace export` reads sacct; the service user needs AdminLevel=Operator")
        elif comp == "jobcomp/filetxt":
            add("accounting", "info", f"no accounting storage; `trace export` reads {conf.get('JobCompLoc')} "
                "(jobcomp/filetxt). Without slurmdbd the daemon must run as root or SlurmUser to change jobs")
        else:
            add("accounting", "warning", "neither accounting storage nor jobcomp/filetxt: `trace export` sees only "
                "the finished jobs slurmctld still remembers (MinJobAge)")
    try:
        parts = backend.partitions()
    except SlurmError as e:
        parts = None
        add("partitions", "warning", f"cannot list partitions: {e}")
    if parts is not None:
        known = [p.name for p in parts]
        if not cfg.partitions:
            default = default_partition(parts)
            add("partitions", "ok" if default else "error",
                f"none configured: Slurm's default partition {default!r} is managed" if default
                else "none configured and Slurm has no default partition: set 'partitions'")
        else:
            missing = [p for p in cfg.partitions if p not in known]
            add("partitions", "error" if missing else "ok",
                f"unknown to Slurm: {', '.join(missing)} (Slurm has {', '.join(known)})" if missing
                else f"{', '.join(cfg.partitions)} exist")
    try:
        topo, src = load_topology(cluster_file=cfg.cluster_file, gres_conf=cfg.gres_conf,
                                  topology_conf=cfg.topology_conf, slurm_config=conf, slurm_conf=cfg.slurm_conf)
        add("topology", "warning" if src.note else "ok",
            f"{len(topo.nodes)} nodes, {topo.num_gpus} GPUs, {len(topo.switch_names)} leaf switches"
            + (f", {len(topo.blocks.names)} blocks (jobs kept to blocks as slurmctld allocates)" if topo.blocks else "")
            + f" from {src.kind} ({', '.join(src.paths)})" + (f": {src.note}" if src.note else ""))
    except (TopologySourceError, TopologyParseError, OSError) as e:
        add("topology", "error", str(e))
    return {"file": cfg.source, "ok": not any(c["level"] == "error" for c in checks), "checks": checks,
            "slurm_checked": True}
