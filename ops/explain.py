"""``attentived explain JOBID``: why a job is where it is.

For a pending job the daemon manages, on one live Slurm snapshot and the configured policy
(the same code the daemon runs):

- **rank** in the plan, and what the plan does with it now: start (on which GPUs), hold
  (GPUs reserved, expected start) or wait;
- **probability** and **competing jobs**: for the learned agent (``policy = "attentive"``)
  the job agent's probability of picking this job now and its attention weights to the
  other jobs (``AttentivePolicy.explain``); for a heuristic, its rank key (waited time,
  estimated run time, users' service, ...) against the jobs ranked just ahead of it;
- **placement**: the chosen GPU set against the best alternatives (the agent's other
  candidates, or what the other placers — first-fit, consolidate, load-balance — would
  pick on the same free GPUs), each with its slowdown from the speed model
  (``SpeedModel.slowdown``), the extra GPU-seconds that costs over the job's estimated run
  time, the slowest link and its spread (islands, nodes, switches);
- **fairness context**: how long this user's jobs wait against everyone else's, the
  user's service so far, and Jain's index over users' current mean waits;
- **Slurm's view**: its priority, its own rank and ``squeue --start`` estimate.

Running and finished jobs get where they run (and, from the journal, where the plan had
put them); pending jobs the daemon does not manage get the reason.
"""

from __future__ import annotations

import json
import math
import re
import time
from typing import Any

import numpy as np

from attentived.agents.order import estimated_runtime
from attentived.agents.pack import PackedPlacer
from attentived.agents.registry import PLACERS
from attentived.agents.state import ClusterState, PendingJob
from attentived.daemon import config as cfgmod
from attentived.daemon.snapshot import in_partitions
from attentived.simulator.metrics import jain
from attentived.topology.speed import SpeedModel, resolve_model

from .inspect import (
    EXIT_BAD_INPUT,
    InspectError,
    Live,
    connect,
    open_journal,
    placer_of,
    policy_for,
    project,
    scores,
    slurm_order,
    slurm_start_estimates,
)


def _option(state: ClusterState, speed: SpeedModel, job: PendingJob, model: str, gpus: tuple[int, ...],
            est: float, **extra: Any) -> dict[str, Any]:
    topo = state.topology
    slowdown = speed.slowdown(model, gpus)
    link, bw = topo.bottleneck(gpus)
    return {
        "gpus": [topo.gpu_name(g) for g in gpus],
        "nodes": sorted({topo.nodes[int(topo.gpu_node[g])].name for g in gpus}),
        "slowdown": slowdown,
        "extra_gpu_seconds": (slowdown - 1.0) * est * job.num_gpus if math.isfinite(est) else None,
        "link": link.name, "link_gbps": bw if math.isfinite(bw) else None,
        "spread": {"islands": topo.spread(gpus)[0], "nodes": topo.spread(gpus)[1], "switches": topo.spread(gpus)[2]},
        **extra,
    }


def fairness(state: ClusterState, user: str) -> dict[str, Any]:
    """The user's waiting and service against the other users'."""
    now = state.now
    waits: dict[str, list[float]] = {}
    for j in state.pending:
        waits.setdefault(j.user, []).append(j.waited(now))
    mine = waits.get(user, [])
    others = [w for u, ws in waits.items() if u != user for w in ws]
    served = state.attained_service
    users = sorted(set(waits) | set(served) | {user})
    by_service = sorted(users, key=lambda u: served.get(u, 0.0))
    total = sum(served.values())
    finished_others = [s.mean_wait for u, s in state.users.items() if u != user and s.jobs]
    return {
        "user": user,
        "user_pending_jobs": len(mine),
        "user_mean_wait": float(np.mean(mine)) if mine else 0.0,
        "others_pending_jobs": len(others),
        "others_mean_wait": float(np.mean(others)) if others else 0.0,
        "user_finished_mean_wait": state.user(user).mean_wait if state.user(user).jobs else None,
        "others_finished_mean_wait": float(np.mean(finished_others)) if finished_others else None,
        "user_service_gpu_hours": served.get(user, 0.0) / 3600,
        "user_service_share": served.get(user, 0.0) / total if total else 0.0,
        "user_rank_least_served": by_service.index(user) + 1,
        "users": len(users),
        "jain_pending_waits": jain([float(np.mean(ws)) for ws in waits.values()]) if waits else 1.0,
        "per_user_mean_wait": {u: float(np.mean(ws)) for u, ws in sorted(waits.items())},
    }


def _journal_info(cfg: cfgmod.Config, job_id: str) -> dict[str, Any] | None:
    journal = open_journal(cfg, required=False)
    if journal is None:
        return None
    try:
        placement = journal.planned([job_id]).get(job_id)
        actions = journal.actions(job=job_id, limit=50)
        last = journal.last_plan()
    finally:
        journal.close()
    if placement:
        for k in ("planned_gpus", "planned_nodes", "actual_nodes", "actual_gpus"):
            placement[k] = json.loads(placement[k]) if placement.get(k) else []
    rank = None
    if last and job_id in (last.get("order") or []):
        rank = {"cycle_id": last["cycle_id"], "rank": last["order"].index(job_id) + 1, "of": len(last["order"])}
    stall = next((st for st in (last or {}).get("stalls") or [] if st.get("job") == job_id), None)
    if not placement and not actions and rank is None and stall is None:
        return None
    merged: list[dict[str, Any]] = []
    for a in actions:  # a dry run repeats the same action every cycle: show it once, counted
        item = {"ts": a["ts"], "kind": a["kind"], "value": a["value"], "ok": bool(a["ok"]), "error": a["error"],
                "dry_run": bool(a["dry_run"]), "times": 1}
        prev = merged[-1] if merged else None
        if prev and all(prev[k] == item[k] for k in ("kind", "value", "ok", "error", "dry_run")):
            prev["times"] += 1
        else:
            merged.append(item)
    return {"placement": placement, "last_plan": rank, "actions": merged, "stall": stall}


def explain(cfg: cfgmod.Config, job_id: str, live: Live | None = None, *, k: int = 5) -> dict[str, Any]:
    if not re.fullmatch(r"\d{1,12}", str(job_id)):
        raise InspectError(f"{job_id!r} is not a Slurm job id (digits only)", EXIT_BAD_INPUT)
    job_id = str(job_id)
    live = live or connect(cfg)
    state, built = live.state, live.built
    sj = live.snap.job(job_id)
    journal = _journal_info(cfg, job_id)
    if sj is None:
        if journal is None:
            raise InspectError(f"job {job_id}: unknown to Slurm (finished longer ago than MinJobAge, or never "
                               "submitted) and not in the journal")
        return {"job": {"id": job_id}, "status": "gone",
                "summary": f"job {job_id} is no longer in Slurm; the journal remembers it", "journal": journal}
    defaults = live.job_defaults
    asked, sj = sj, defaults.applied(sj)  # as slurmctld will allocate it
    base = {"id": job_id, "user": sj.user, "name": sj.name, "partition": sj.partition, "state": sj.state,
            "reason": sj.reason, "gpus": sj.gpus,
            "nodes_requested": sj.num_nodes if sj.per_node_fixed or sj.num_nodes > 1 else None,
            "submitted": sj.submit_time, "time_limit": sj.time_limit, "priority": sj.priority,
            "cpus": sj.cpus, "mem_per_node": sj.mem_per_node or None, "mem_per_cpu": sj.mem_per_cpu or None,
            "mem_per_gpu": sj.mem_per_gpu or None,
            "exclusive": sj.exclusive, "gpu_type": sj.gpu_type or None, "required_nodes": list(sj.required_nodes),
            "excluded_nodes": list(sj.excluded_nodes), "features": sj.features or None}
    shown = "(squeue shows it once slurmctld has looked at the job)"
    if sj.cpus != asked.cpus:
        base["cpus_from"] = f"{defaults.origin(sj.partition, 'cpus_per_gpu')} DefCpuPerGPU {shown}"
    if sj.mem_per_gpu != asked.mem_per_gpu:
        base["memory_from"] = f"{defaults.origin(sj.partition, 'mem_per_gpu')} DefMemPerGPU {shown}"
    elif sj.exclusive != asked.exclusive:
        base["memory_from"] = (f"none asked where Slurm allocates memory ({defaults.origin(sj.partition, 'memory_consumable')} "
                               "CR_*_Memory): all of each node's, so whole nodes")
    elif (sj.mem_per_node, sj.mem_per_cpu) != (asked.mem_per_node, asked.mem_per_cpu):
        base["memory_from"] = "its memory per GPU, which replaces a default per CPU or node the user did not set"
    fair = fairness(state, sj.user)
    if not sj.pending:
        topo = live.topology
        gpus = built.running_gpus.get(job_id, ())
        summary = (f"job {job_id} is {sj.state}" + (f" on {', '.join(sj.nodes)}" if sj.nodes else "")
                   + (f" (GPUs {', '.join(topo.gpu_name(g) for g in gpus)})" if gpus else ""))
        if journal and journal.get("placement") and journal["placement"].get("match"):
            p = journal["placement"]
            summary += f"; attentived had planned {', '.join(p['planned_gpus']) or '-'} ({p['match']})"
        return {"job": {**base, "nodes": list(sj.nodes), "gpus_used": [topo.gpu_name(g) for g in gpus],
                        "started": sj.start_time, "ended": sj.end_time},
                "status": sj.state.lower(), "summary": summary, "fairness": fair, "journal": journal}
    if job_id not in built.managed:
        if not in_partitions(sj, live.partitions):
            why = f"its partition {sj.partition} is not managed by attentived (managed: {', '.join(live.partitions)})"
        elif not sj.eligible:
            why = f"it cannot start whatever the order: {sj.reason or 'held'}" + (" (held)" if sj.held else "")
        elif sj.gpus <= 0:
            why = "it asks for no GPU"
        else:
            why = "it is not in the plan"
        return {"job": base, "status": "not managed", "summary": f"job {job_id} is pending but not planned: {why}",
                "fairness": fair, "journal": journal}

    policy, name, fallback = policy_for(cfg)
    plan = policy.decide(state)
    order = list(plan.order)
    rank = order.index(job_id) + 1
    job = next(j for j in state.pending if j.job_id == job_id)
    starts = {s.job_id: s for s in plan.starts}
    holds = {h.job_id: h for h in plan.holds}
    masks: dict[str, np.ndarray] = {job_id: np.zeros(0, bool)}
    placer = placer_of(policy)  # through any wrapper (``one_node=1`` forwards to ``pack=1``'s)
    proj = project(plan, state, placer, masks=masks)
    speed = SpeedModel(state.topology)
    model = resolve_model(job.model, job_id, job.num_gpus, cfg.seed)
    est = estimated_runtime(job, state)
    score = scores(policy, state)
    learned = hasattr(policy, "explain") and hasattr(policy, "encoder")
    ruled = isinstance(placer, PackedPlacer)  # pack=1: the packing rule places every start, not the GPU agent
    by_id = {j.job_id: j for j in state.pending}

    if job_id in starts:
        decision: dict[str, Any] = {"action": "start", "when": state.now}
        chosen = tuple(starts[job_id].gpus)
    elif job_id in holds:
        decision = {"action": "hold", "when": holds[job_id].expected_start}
        chosen = tuple(holds[job_id].gpus)
    else:
        when = proj.get(job_id, (None, ()))[0]
        decision = {"action": "wait", "when": when}
        chosen = proj.get(job_id, (None, ()))[1]
    ahead = order[: rank - 1]
    blocking = [j for j in ahead if j in starts or j in holds]

    probability = None
    top_jobs: list[dict[str, Any]] = []
    competing: list[dict[str, Any]] = []
    placement: dict[str, Any] | None = None
    alternatives: list[dict[str, Any]] = []
    if learned:
        exp = policy.explain(state, job_id, k=len(order) + 1)  # type: ignore[attr-defined]
        probs = {o.job_id: o.probability for o in exp.top_jobs}
        probability = probs.get(job_id)
        top_jobs = [{"job": o.job_id or "WAIT", "probability": o.probability} for o in exp.top_jobs[:k]]
        for other, weight in exp.attention[:k]:
            oj = by_id.get(other)
            competing.append({"job": other, "user": oj.user if oj else "", "gpus": oj.num_gpus if oj else None,
                              "rank": order.index(other) + 1 if other in order else None, "attention": weight,
                              "probability": probs.get(other)})
        if exp.placement is not None and ruled:
            alternatives.append(_option(state, speed, job, model, tuple(exp.placement.gpus), est,
                                        source="agent (pack=1 places by the packing rule instead)",
                                        probability=exp.placement.probability))
        elif exp.placement is not None:
            placement = _option(state, speed, job, model, tuple(exp.placement.gpus), est,
                                source="agent", probability=exp.placement.probability)
            for o in exp.alternatives[: k - 1]:
                alternatives.append(_option(state, speed, job, model, tuple(o.gpus), est,
                                            source="agent: " + "/".join(o.sources), probability=o.probability))
            if tuple(sorted(chosen)) != tuple(sorted(exp.placement.gpus)):
                placement["note"] = ("the agent's GPUs are its pick if this job started first, on the GPUs free now; "
                                     + ("in the plan other starts come first" if decision["action"] == "start"
                                        else "the plan's (projected) GPUs are listed as 'plan'"))
                if chosen:
                    alternatives.insert(0, _option(state, speed, job, model, tuple(chosen), est,
                                                   source={"start": "plan", "hold": "plan hold (reserved)",
                                                           "wait": "plan (projected)"}[decision["action"]]))
    else:
        mine = score.get(job_id, (None, ""))[1]
        for other in list(reversed(ahead))[:k]:
            oj = by_id[other]
            competing.append({"job": other, "user": oj.user, "gpus": oj.num_gpus, "rank": order.index(other) + 1,
                              "attention": None, "score": score.get(other, (None, ""))[1],
                              "relation": f"ranked ahead by {name}: {score.get(other, (None, '?'))[1]} vs {mine}",
                              "takes_gpus": "starts now" if other in starts else ("held" if other in holds else "")})
    if placement is None and chosen:
        placement = _option(state, speed, job, model, tuple(chosen), est,
                            source={"start": "plan start", "hold": "plan hold (reserved)", "wait": "projected"}[
                                decision["action"]] + (", by the packing rule" if ruled else ""))
    placement_note = None
    if placement is None:
        placement_note = ("no GPUs planned yet: the jobs ahead of it wait for running jobs without a time limit, "
                          "so when GPUs free up is unknown" if not chosen else None)
    mask = masks.get(job_id)
    if not learned and chosen and mask is not None and len(mask):
        seen = {tuple(sorted(chosen))}
        for pname, factory in PLACERS.items():
            try:
                g = factory(cfg.seed).place(job, mask, state)
            except Exception:
                g = None
            if g is None or tuple(sorted(g)) in seen:
                continue
            seen.add(tuple(sorted(g)))
            alternatives.append(_option(state, speed, job, model, tuple(int(x) for x in g), est, source=pname))
        alternatives.sort(key=lambda o: o["slowdown"])

    estimates = slurm_start_estimates(live.backend)
    slurm_rank = next((i + 1 for i, j in enumerate(slurm_order(list(built.managed.values()))) if j.job_id == job_id), None)
    what = {"start": "starts now", "hold": "is held: GPUs reserved for it", "wait": "waits"}[decision["action"]]
    summary = (f"job {job_id} ({sj.user}, {job.num_gpus} GPU{'s' if job.num_gpus != 1 else ''}) is #{rank} of "
               f"{len(order)} under {name} and {what}")
    if decision["action"] == "wait" and blocking:
        summary += f" behind {len(ahead)} job(s) ranked ahead ({', '.join(blocking[:3])} start now or are held)"
    elif decision["action"] == "wait":
        summary += f" behind {len(ahead)} job(s) ranked ahead"
    if job_id in built.constrained:
        summary += "; it carries its own node constraints, so attentived orders it but does not place it"
    stall = (journal or {}).get("stall")
    if stall:
        summary += (f"; its last planned start on {','.join(stall['nodes'])} did not happen (Slurm: {stall['reason']}), "
                    f"so the daemon keeps it off {','.join(stall['nodes'])} until "
                    f"{time.strftime('%H:%M:%S', time.localtime(stall['avoid_until']))}")
    reserved = built.reserved_for_others.get(job_id)
    if reserved:
        by_name = {r.name: r for r in built.snapshot.reservations}
        summary += "; its time limit reaches " + ", ".join(
            f"reservation {n} (on {','.join(by_name[n].nodes)}, from "
            f"{time.strftime('%H:%M:%S', time.localtime(by_name[n].start_time or 0))})" for n in reserved
        ) + ", so Slurm would not start it there and the daemon keeps it off those nodes"
    known = {re.sub(r"[^a-z0-9]", "", n.lower()) for n in speed.profiles}
    declared = bool(job.model) and re.sub(r"[^a-z0-9]", "", (job.model or "").lower()) in known
    return {
        "job": {**base, "model": job.model, "speed_profile": model, "speed_profile_declared": declared,
                "estimated_runtime": est if math.isfinite(est) else None, "waited": job.waited(state.now)},
        "status": "pending",
        "summary": summary,
        "policy": name, "policy_fallback": fallback or None, "learned": learned,
        "rank": rank, "of": len(order), "decision": decision,
        "score": score.get(job_id, (None, ""))[0], "score_label": score.get(job_id, (None, "-"))[1],
        "probability": probability, "top_jobs": top_jobs,
        "competing": competing, "ahead": len(ahead), "blocking": blocking,
        "placement": placement, "placement_note": placement_note, "alternatives": alternatives[: k],
        "fairness": fair,
        "slurm": {"priority": sj.priority, "rank": slurm_rank, "reason": sj.reason,
                  "expected_start": estimates.get(job_id)},
        "journal": journal,
        "computed_at": state.now,
    }
