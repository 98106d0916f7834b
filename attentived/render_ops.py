"""Terminal rendering of the operator commands (status, queue, explain, decisions, topology
--slurm, config check, shadow-report, trace export). Each function takes the JSON-ready
document the command computed (``ops/inspect.py`` & co.) and prints it with rich."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

from .render import _console, _duration


def _when(ts: float | None, now: float | None = None) -> str:
    """Local time, with the day when it is not today, and how far from now."""
    if ts is None or (isinstance(ts, float) and not math.isfinite(ts)):
        return "-"
    now = time.time() if now is None else now
    lt = time.localtime(ts)
    text = time.strftime("%H:%M:%S" if time.localtime(now)[:3] == lt[:3] else "%Y-%m-%d %H:%M", lt)
    delta = ts - now
    if abs(delta) < 1:
        return f"{text} (now)"
    return f"{text} ({'in ' if delta > 0 else ''}{_duration(abs(delta))}{'' if delta > 0 else ' ago'})"


def _secs(v: float | None) -> str:
    return "-" if v is None else _duration(v)


def _level(level: str) -> str:
    return {"ok": "[green]ok[/]", "info": "[cyan]info[/]", "warning": "[yellow]warning[/]",
            "error": "[bold red]error[/]"}.get(level, level)


def _kv(title: str, rows: Sequence[tuple[str, str]], console: Console) -> None:
    t = Table(title=title, title_justify="left", show_header=False, box=None, pad_edge=False)
    t.add_column("key", style="bold")
    t.add_column("value")
    for k, v in rows:
        t.add_row(k, v)
    console.print(t)


# ---- status -----------------------------------------------------------------------------------


def status(doc: Mapping[str, Any], console: Console | None = None) -> None:
    console = console or _console()
    d = doc["daemon"]
    if d["running"]:
        alive = f"[green]running[/] (pid {d['pid']}, last heartbeat {_when(d['heartbeat'])})"
        if d["stale"]:
            alive = f"[yellow]stale[/]: {d['reason']}"
    else:
        alive = f"[red]not running[/]: {d['reason']}"
    last = doc.get("last_cycle") or {}
    if last:
        res = "[green]ok[/]" if last.get("ok") else f"[red]failed[/]: {last.get('error') or ''}"
        counts = last.get("counts") or {}
        cycle = (f"{_when(last.get('started'))}, {last.get('duration', 0):.2f} s, {res}; {counts.get('managed', 0)} queued, "
                 f"{counts.get('running', 0)} running, {counts.get('free_gpus', '?')} GPUs free, "
                 f"{last.get('actions', 0)} actions ({last.get('failed', 0)} failed)")
    else:
        cycle = "-"
    slurm = doc["slurm"]
    if slurm.get("reachable") is None:
        reach = "not checked"
    elif slurm["reachable"]:
        reach = f"[green]reachable[/] (Slurm {slurm.get('version')}; {slurm.get('controller') or ''})"
    else:
        reach = f"[red]unreachable[/]: {slurm.get('error')}"
    acct = doc.get("accounting")
    if not acct:
        accounting = "- (no slurmdbd, or not checked)"
    elif acct.get("reachable"):
        accounting = f"[green]answering[/] ({acct.get('storage')}, checked {_when(acct.get('checked'))})"
    else:
        accounting = f"[red]not answering[/] since {_when(acct.get('down_since'))}: {acct.get('error')}"
    policy = doc["policy"] + (f" [red](fallback: {doc['policy_fallback']})[/]" if doc.get("policy_fallback") else "")
    rows = [
        ("daemon", alive),
        ("mode", {"live": "[bold]live[/] (changes Slurm)", "dry-run": "dry-run (plans, changes nothing)",
                  "shadow": "[cyan]shadow[/] (plans and observes beside Slurm's scheduler, changes nothing)"}.get(
                      doc["mode"], doc["mode"])
         + ("; [dim]from the config: the daemon has not run here[/]" if doc.get("from_config_only")
            else ("" if d["running"] else " [dim](its last run)[/]"))),
        ("policy", policy),
        ("model", doc.get("model") or "-"),
        ("partitions", ", ".join(doc["partitions"]) or "(Slurm's default)"),
        ("interval", f"{doc['interval']:g} s, hold mode {doc['hold_mode']}"),
        ("last cycle", cycle),
        ("last good cycle", _when(doc.get("last_ok_cycle"))),
        ("errors", f"{doc.get('errors_total', 0)} since start" + (f"; last 24 h: {len(doc['recent_errors'])} failed cycle(s)"
                                                                  if doc.get("recent_errors") else "")),
        ("Slurm", reach),
        ("accounting", accounting),
        ("state dir", d["state_dir"] + ("" if d["state_dir_exists"] else " [red](missing)[/]")),
        ("config", doc["config"]),
    ]
    _kv("attentived status", rows, console)
    for e in doc.get("recent_errors", [])[:5]:
        console.print(f"  [red]{e['status']}[/] {_when(e['started'])} {e['cycle_id']}: {e.get('error') or ''}")
    for f in doc.get("slurm_findings", []):
        if f.get("level") in ("warning", "error"):
            console.print(f"  {_level(f['level'])} {f.get('key')}: {f.get('message')}")
    for w in doc.get("warnings", []):
        console.print(f"  {_level('warning')} {w}")


# ---- queue ------------------------------------------------------------------------------------


def queue(doc: Mapping[str, Any], console: Console | None = None) -> None:
    console = console or _console()
    daemon = doc.get("daemon") or {}
    state = f"daemon {daemon.get('mode') or 'live'}" if daemon.get("running") else "daemon not running"
    title = (f"queue: {doc['pending']} pending in {', '.join(doc['partitions'])}, planned now by {doc['policy']} "
             f"({state}); {doc['free_gpus']}/{doc['total_gpus']} GPUs free, {doc['running_jobs']} running")
    if not doc["jobs"]:
        console.print(f"[bold]{title}[/]")
        nm = doc.get("not_managed") or {}
        extra = ", ".join(f"{v} {k.replace('_', ' ')}" for k, v in nm.items() if v)
        console.print("no pending GPU jobs to plan" + (f" (not planned: {extra})" if extra else ""))
        return
    t = Table(title=title, title_justify="left")
    for c, j in (("#", "right"), ("job", "left"), ("user", "left"), ("GPUs", "right"), ("waited", "right"),
                 ("score", "left"), ("plan", "left"), ("planned GPUs", "left"), ("expected start", "left"),
                 ("Slurm #", "right"), ("Slurm prio", "right"), ("Slurm start", "left"), ("reason", "left")):
        t.add_column(c, justify=j)  # type: ignore[arg-type]
    for r in doc["jobs"]:
        action = {"start": "[green]start[/]", "hold": "[yellow]hold[/]", "wait": "wait"}[r["action"]]
        gpus = ", ".join(r["planned_gpus"][:4]) + (f" +{len(r['planned_gpus']) - 4}" if len(r["planned_gpus"]) > 4 else "")
        if r.get("constrained"):
            gpus = "(own constraints)"
        shape = f"{r['gpus']}" + (f" ({r['nodes_requested']}n)" if r.get("nodes_requested") and r["nodes_requested"] > 1 else "")
        t.add_row(str(r["rank"]), r["job"], r["user"], shape, _secs(r["waited"]), r["score_label"], action, gpus or "-",
                  "now" if r["action"] == "start" else _when(r["expected_start"]), str(r["slurm_rank"] or "-"), str(r["slurm_priority"]),
                  _when(r.get("slurm_expected_start")), r.get("slurm_reason") or "")
    console.print(t)
    if doc["shown"] < doc["pending"]:
        console.print(f"[dim]... {doc['pending'] - doc['shown']} more (--limit)[/]")
    console.print(f"[dim]Slurm would start next (its own priority order): {', '.join(doc['slurm_next']) or '-'}[/]")
    if doc.get("last_plan"):
        lp = doc["last_plan"]
        console.print(f"[dim]daemon's last plan: cycle {lp['cycle_id']} ({_when(lp['created'])}), "
                      f"{'same order as now' if lp['same_order'] else 'order differs from now (the queue changed)'}[/]")
    console.print(f"[dim]{doc['note']}[/]")


def queue_journal(doc: Mapping[str, Any], console: Console | None = None) -> None:
    console = console or _console()
    t = Table(title=f"the daemon's last plan (cycle {doc['cycle_id']}, {_when(doc['created'])}, {doc.get('policy')})",
              title_justify="left")
    for c in ("#", "job", "plan", "planned GPUs", "expected start"):
        t.add_column(c)
    for r in doc["jobs"]:
        t.add_row(str(r["rank"]), r["job"], r["action"], ", ".join(r["planned_gpus"]) or "-", _when(r["expected_start"]))
    console.print(t)


# ---- explain ----------------------------------------------------------------------------------


def _opt_row(t: Table, label: str, o: Mapping[str, Any]) -> None:
    x = o.get("extra_gpu_seconds")
    extra = "-" if x is None else (f"{x / 3600:.2f} GPU-h" if abs(x) >= 360 else f"{x:.0f} GPU-s")
    spread = o["spread"]
    p = "" if o.get("probability") is None else f"{o['probability']:.3f}"
    t.add_row(label, ", ".join(o["gpus"]), f"{o['slowdown']:.3f}x", extra, o["link"],
              f"{spread['islands']}/{spread['nodes']}/{spread['switches']}", p, o.get("source", ""))


def explain(doc: Mapping[str, Any], console: Console | None = None) -> None:
    console = console or _console()
    console.print(f"[bold]{doc['summary']}[/]")
    job = doc["job"]
    if doc["status"] != "pending":
        rows = [(k, str(v)) for k, v in (("state", job.get("state")), ("partition", job.get("partition")),
                                           ("reason", job.get("reason")), ("nodes", ", ".join(job.get("nodes", []))),
                                           ("GPUs", ", ".join(job.get("gpus_used", []))),
                                           ("started", _when(job.get("started"))), ("ended", _when(job.get("ended"))))
                if v not in (None, "", "-")]
        if rows:
            _kv(f"job {job['id']}", rows, console)
        _journal(doc.get("journal"), console)
        if doc.get("fairness"):
            _fairness(doc["fairness"], console)
        return
    dec = doc["decision"]
    rows = [
        ("user / GPUs", f"{job['user']} / {job['gpus']}" + (f" on {job['nodes_requested']} nodes"
                                                             if (job.get("nodes_requested") or 1) > 1 else "")),
        ("waited", _secs(job["waited"]) + f" (time limit {_secs(job.get('time_limit'))}, estimated run "
                                          f"{_secs(job.get('estimated_runtime'))})"),
        ("workload", f"{job.get('model') or 'not declared'} (speed profile {job['speed_profile']}"
                     + ("" if job.get("speed_profile_declared") else ", a stand-in: declare model=NAME in the job comment")
                     + ")"),
        ("policy", doc["policy"] + (f" [red](fallback: {doc['policy_fallback']})[/]" if doc.get("policy_fallback") else "")),
        ("rank", f"{doc['rank']} of {doc['of']}" + (
            (f", the agent picks it now with p={doc['probability']:.3f}" if doc.get("probability") is not None
             else ", it cannot start now (the agent gives it no probability)") if doc.get("learned")
            else (f" ({doc['score_label']})" if doc.get("score_label") not in (None, "-", "") else ""))),
        ("decision", {"start": "[green]start now[/]", "hold": "[yellow]hold[/]: GPUs reserved", "wait": "wait"}[dec["action"]]
         + f", expected start {_when(dec.get('when'))}"),
        ("Slurm's view", f"priority {doc['slurm']['priority']}, its own rank {doc['slurm']['rank']}, reason "
                         f"{doc['slurm']['reason'] or '-'}, squeue --start {_when(doc['slurm']['expected_start'])}"),
    ]
    _kv(f"job {job['id']}", rows, console)
    if doc.get("top_jobs"):
        t = Table(title="job agent: most likely next picks", title_justify="left", min_width=40)
        t.add_column("job")
        t.add_column("probability", justify="right")
        for o in doc["top_jobs"]:
            t.add_row(("[bold]" + o["job"] + "[/]") if o["job"] == job["id"] else o["job"], f"{o['probability']:.3f}")
        console.print(t)
    if doc.get("competing"):
        learned = doc.get("learned")
        t = Table(title="competing jobs" + (" (the agent's attention from this job)" if learned else " (ranked just ahead)"),
                  title_justify="left", min_width=60)
        for c in ("job", "user", "GPUs", "rank", "attention" if learned else "why ahead", "now"):
            t.add_column(c)
        for c in doc["competing"]:
            t.add_row(c["job"], c["user"], str(c["gpus"]), str(c["rank"] or "-"),
                      f"{c['attention']:.3f}" if learned else c.get("relation", ""),
                      (f"p={c['probability']:.3f}" if c.get("probability") is not None else "") if learned
                      else c.get("takes_gpus", ""))
        console.print(t)
    if doc.get("placement"):
        t = Table(title="placement: chosen GPUs vs alternatives (slowdown from the speed model; extra = GPU time "
                        "lost over the estimated run time)", title_justify="left")
        for c, j in (("", "left"), ("GPUs", "left"), ("slowdown", "right"), ("extra GPU time", "right"),
                     ("slowest link", "left"), ("islands/nodes/switches", "right"), ("p", "right"), ("from", "left")):
            t.add_column(c, justify=j)  # type: ignore[arg-type]
        _opt_row(t, "[bold]chosen[/]", doc["placement"])
        for o in doc.get("alternatives", []):
            _opt_row(t, "alternative", o)
        console.print(t)
        if doc["placement"].get("note"):
            console.print(f"[dim]{doc['placement']['note']}[/]")
    elif doc.get("placement_note"):
        console.print(f"placement: {doc['placement_note']}")
    _fairness(doc["fairness"], console)
    _journal(doc.get("journal"), console)


def _fairness(f: Mapping[str, Any], console: Console) -> None:
    fin = f.get("user_finished_mean_wait")
    others_fin = f.get("others_finished_mean_wait")
    rows = [
        ("pending waits", f"{f['user']}: {f['user_pending_jobs']} job(s), mean {_secs(f['user_mean_wait'])}; "
                          f"others: {f['others_pending_jobs']} job(s), mean {_secs(f['others_mean_wait'])}"),
        ("finished waits", f"{f['user']}: {_secs(fin)}; others: {_secs(others_fin)}"),
        ("service so far", f"{f['user_service_gpu_hours']:.2f} GPU-h ({100 * f['user_service_share']:.0f}% of all), "
                           f"#{f['user_rank_least_served']} least served of {f['users']} users"),
        ("Jain (users' mean waits)", f"{f['jain_pending_waits']:.3f} (1 = every user waits the same)"),
    ]
    _kv("fairness context", rows, console)


def _journal(j: Mapping[str, Any] | None, console: Console) -> None:
    if not j:
        return
    p = j.get("placement")
    if p:
        console.print(f"[dim]journal: planned {', '.join(p.get('planned_gpus') or []) or '-'} at {_when(p.get('planned_at'))}"
                      + (f"; started {_when(p.get('started_at'))} on {', '.join(p.get('actual_gpus') or p.get('actual_nodes') or [])}"
                         f" ({p.get('match')})" if p.get("started_at") else "") + "[/]")
    if j.get("last_plan"):
        lp = j["last_plan"]
        console.print(f"[dim]daemon's last plan ({lp['cycle_id']}): #{lp['rank']} of {lp['of']}[/]")
    for a in (j.get("actions") or [])[:5]:
        times = f" x{a['times']}" if a.get("times", 1) > 1 else ""
        console.print(f"[dim]  {_when(a['ts'])} {a['kind']} {a.get('value') or ''} "
                      f"{'ok' if a['ok'] else 'FAILED ' + (a.get('error') or '')}{' (dry run)' if a['dry_run'] else ''}"
                      f"{times}[/]")


# ---- decisions ----------------------------------------------------------------------------------


def decisions(doc: Mapping[str, Any], console: Console | None = None) -> None:
    console = console or _console()
    if doc.get("job"):
        p = doc.get("placement")
        if p:
            rows = [("planned", f"{', '.join(p.get('planned_gpus') or []) or '-'} ({_when(p.get('planned_at'))}, cycle {p.get('cycle_id')})"),
                    ("started", f"{_when(p.get('started_at'))} on {', '.join(p.get('actual_gpus') or p.get('actual_nodes') or []) or '-'}"),
                    ("match", p.get("match") or "-")]
            _kv(f"job {doc['job']}: placement", rows, console)
        if doc.get("plans"):
            t = Table(title=f"job {doc['job']} in the daemon's plans (newest first)", title_justify="left")
            for c in ("time", "cycle", "rank", "plan", "nodes", "expected start"):
                t.add_column(c)
            for h in doc["plans"]:
                t.add_row(_when(h["created"]), h["cycle_id"], f"{h['rank']}/{h['of']}", h["action"],
                          ", ".join(h["nodes"]) or "-", _when(h["expected_start"]))
            console.print(t)
    elif doc["cycles"]:
        t = Table(title="cycles (newest first)", title_justify="left")
        for c, j in (("time", "left"), ("cycle", "left"), ("mode", "left"), ("policy", "left"), ("result", "left"),
                     ("queued", "right"), ("running", "right"), ("actions", "right"), ("s", "right")):
            t.add_column(c, justify=j)  # type: ignore[arg-type]
        for c in doc["cycles"]:
            res = "[green]ok[/]" if c["status"] == "ok" else f"[red]{c['status']}[/] {c.get('error') or ''}"
            t.add_row(_when(c["started"]), c["cycle_id"], c["mode"] or "", c["policy"] or "", res, str(c["pending"]),
                      str(c["running"]), f"{c['actions']}" + (f" ({c['failed']} failed)" if c["failed"] else ""),
                      f"{c['duration'] or 0:.2f}")
        console.print(t)
    else:
        console.print("no cycles recorded" + (" in this window" if doc.get("since") else " yet"))
    if doc["actions"]:
        t = Table(title="Slurm actions" + (f" for job {doc['job']}" if doc.get("job") else "") + " (newest first)",
                  title_justify="left")
        for c in ("time", "cycle", "action", "job", "reservation", "value", "result", "why"):
            t.add_column(c)
        for a in doc["actions"]:
            res = ("[dim]dry run[/]" if a["dry_run"] else "[green]ok[/]") if a["ok"] else f"[red]failed[/] {a.get('error') or ''}"
            t.add_row(_when(a["ts"]), a["cycle_id"], a["kind"], a["job"] or "", a["reservation"] or "",
                      (a["value"] or "")[:40], res, a.get("reason") or "")
        console.print(t)
        if doc.get("more_actions"):
            console.print("[dim]... more actions (--limit, --since)[/]")
    elif doc.get("job"):
        console.print(f"no Slurm action on job {doc['job']}" + (" in this window" if doc.get("since") else ""))


# ---- topology --slurm -----------------------------------------------------------------------------


def topology_live(doc: Mapping[str, Any], console: Console | None = None) -> None:
    console = console or _console()
    console.print(f"[dim]from Slurm at {_when(doc['taken_at'])}; topology {doc['source']}; managed partitions "
                  f"{', '.join(doc['partitions'])}: {doc['free_gpus']} GPUs free, {doc['used_gpus']} in use[/]")
    t = Table(title="jobs on GPUs", title_justify="left")
    for c in ("node", "used GPUs", "jobs", "not usable because"):
        t.add_column(c)
    for n in doc["nodes"]:
        jobs: dict[str, list[int]] = {}
        for e in n["jobs"]:
            jobs.setdefault(f"{e['job']} ({e['user']})", []).append(e["gpu"])
        t.add_row(n["name"], ",".join(map(str, n["used"])) or "-",
                  "; ".join(f"{k}: {','.join(map(str, sorted(v)))}" for k, v in jobs.items()) or "-",
                  n.get("unusable") or "")
    console.print(t)


# ---- config check ----------------------------------------------------------------------------------


def config_check(doc: Mapping[str, Any], console: Console | None = None) -> None:
    console = console or _console()
    t = Table(title=f"config check: {doc['file']}", title_justify="left")
    t.add_column("check")
    t.add_column("result")
    t.add_column("detail")
    for c in doc["checks"]:
        t.add_row(c["check"], _level(c["level"]), c["message"])
    console.print(t)
    console.print("[green]ready[/]" if doc["ok"] else "[red]not ready: fix the errors above[/]")


# ---- shadow report ------------------------------------------------------------------------------------


def shadow_report(doc: Mapping[str, Any], console: Console | None = None) -> None:
    from attentived.ops.shadow import COMPARED

    console = console or _console()
    names = list(doc["summaries"])
    observed, policies = names[0], names[1:]
    jobs = doc["jobs"]
    w = doc["window"]
    t = Table(title=(f"shadow report: {jobs['compared']} finished jobs from {_when(w['since']) if w['since'] else 'the start'} "
                     f"to {_when(w['until'])} on {doc['cluster']['gpus']} GPUs: Slurm as observed vs attentived "
                     "replayed on the same arrivals"), title_justify="left")
    t.add_column("metric")
    t.add_column(observed, justify="right")
    for n in policies:
        t.add_column(f"{n} (simulated)", justify="right")
        t.add_column("projected change", justify="right")
    diffs = doc["differences"]
    for key, label, unit, better in COMPARED:
        cells = [_metric(doc["summaries"][observed][key], unit)]
        for n in policies:
            cells.append(_metric(doc["summaries"][n][key], unit))
            d = diffs[n][key]
            if abs(d["change"]) < 1e-9:
                cells.append("=")
                continue
            good = (d["change"] < 0) if better == "lower" else (d["change"] > 0)
            txt = f"{d['change']:+.3f}" if unit in ("", "x") else _signed(d["change"], unit)
            if d["relative"] is not None:
                txt += f" ({100 * d['relative']:+.0f}%)"
            cells.append(f"[green]{txt}[/]" if good else f"[red]{txt}[/]")
        t.add_row(label, *cells)
    console.print(t)
    console.print(f"[dim]jobs: {jobs['observed']} arrived in the window, {jobs['compared']} compared, "
                  f"{jobs['unfinished']} not finished, {jobs['never_started']} ended without starting; green = better "
                  "under attentived[/]")
    for n in doc.get("notes", []):
        console.print(f"[dim]note: {n}[/]")


def _metric(v: float, unit: str) -> str:
    if unit == "s":
        return _duration(v)
    if unit == "GPU-s":
        return f"{v / 3600:.2f} GPU-h"
    if unit == "x":
        return f"{v:.2f}x"
    return f"{v:.3f}"


def _signed(v: float, unit: str) -> str:
    if unit == "GPU-s":
        return f"{v / 3600:+.2f} GPU-h"
    return ("+" if v >= 0 else "-") + _duration(abs(v))


# ---- trace export ------------------------------------------------------------------------------------


def export_summary(doc: Mapping[str, Any], console: Console | None = None) -> None:
    console = console or Console(stderr=True)
    sk = ", ".join(f"{v} {k.replace('_', ' ')}" for k, v in doc["skipped"].items() if v) or "none"
    console.print(f"wrote {doc['path']}: {doc['jobs']} jobs of {doc['users']} users from {doc['source']} "
                  f"(submitted {_when(doc['first_submit'])} .. {_when(doc['last_submit'])}); skipped: {sk}"
                  + (f"; users hashed ({doc['salt']})" if doc["hashed_users"] else ""))
    for n in doc.get("notes", []):
        console.print(f"[dim]note: {n}[/]")


# ---- JSON ------------------------------------------------------------------------------------------


def _finite(v: Any) -> Any:
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, Mapping):
        return {str(k): _finite(x) for k, x in v.items()}
    if isinstance(v, (list, tuple, set, frozenset)):
        return [_finite(x) for x in v]
    return v


def to_json(doc: Any) -> str:
    """Strict JSON for ``--json``: infinities (no time limit, unknown) become null."""
    import json

    return json.dumps(_finite(doc), indent=2, default=str, allow_nan=False)
