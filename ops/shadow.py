"""Shadow mode: watch Slurm schedule on its own, plan beside it, and project the difference.

``attentived start --shadow`` runs the normal cycle (snapshot, state, plan, journal) but
applies nothing, like ``--dry-run``; in addition every cycle records what Slurm did with
each GPU job — when it arrived, when and where it started, when it ended — in
``<state_dir>/shadow.sqlite`` (``daemon.observe.Observer``, one row per job, written only when something
about the job changed). The decision journal (``journal.sqlite``) keeps the plans, with
mode ``shadow``.

``attentived shadow-report`` (``build_report``) then takes the jobs whose whole life was
observed (arrived in the window, started, ended) and computes the same metrics twice:

- **Slurm (observed)**: the observed submit, start and end times and the GPUs Slurm gave
  each job. Communication cost comes from the speed model: a job that ran ``t`` seconds
  on GPUs with slowdown ``s`` (``topology/speed.py``) would have run ``t / s`` on the
  ideal placement; the difference, times its GPUs, is its cost.
- **attentived (simulated)**: the same arrivals replayed through the simulator under
  attentived's policy, each job running its ideal duration times the slowdown of the
  GPUs the policy gives it, with the job's own time limit (or a modelled one).

Limits, which the report repeats: the replay starts from an idle cluster at the first
arrival and sees only the managed GPU jobs of the window; jobs in other partitions and
jobs already running when the window opened occupied GPUs in reality but not in the
replay (their GPU-hours are reported as ``background_gpu_hours``). Run times are taken as
measured, so a job that would have behaved differently elsewhere is not modelled.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import os
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from attentived.agents.policy import Policy
from attentived.atomic import write_folder
from attentived.daemon.observe import ShadowError
from attentived.simulator.engine import JobRecord, SimJob, Simulation
from attentived.simulator.limits import time_limit as modelled_limit
from attentived.simulator.metrics import summarize, user_mean_waits
from attentived.simulator.trace import TraceJob
from attentived.topology import Topology
from attentived.topology.speed import SpeedModel, resolve_model

# ---- the report -------------------------------------------------------------------------------

_FINISHED = {"COMPLETED", "FAILED", "TIMEOUT", "CANCELLED", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY", "DEADLINE",
             "BOOT_FAIL", "SPECIAL_EXIT"}
#: The metrics the report compares, with how to read them (lower is better unless noted).
COMPARED = (
    ("avg_jct", "avg JCT", "s", "lower"),
    ("p50_jct", "median JCT", "s", "lower"),
    ("p99_jct", "p99 JCT", "s", "lower"),
    ("avg_wait", "avg wait", "s", "lower"),
    ("p99_wait", "p99 wait", "s", "lower"),
    ("jain_fairness", "wait fairness (Jain)", "", "higher"),
    ("max_user_wait", "worst user's mean wait", "s", "lower"),
    ("jain_slowdown", "slowdown fairness (Jain)", "", "higher"),
    ("wait_ratio", "max/min user wait", "x", "lower"),
    ("comm_cost", "comm cost", "GPU-s", "lower"),
    ("multi_gpu_slowdown", "multi-GPU slowdown", "x", "lower"),
    ("utilization", "utilization", "", "higher"),
)


@dataclass
class ShadowReport:
    since: float | None
    until: float
    topology: Topology
    observed: list[JobRecord]
    simulated: dict[str, list[JobRecord]]
    summaries: dict[str, dict[str, float]]  # "slurm (observed)" and each policy
    counts: dict[str, int]
    notes: list[str] = field(default_factory=list)
    guessed: set[str] = field(default_factory=set)
    observing_since: float | None = None

    OBSERVED = "slurm (observed)"

    def differences(self) -> dict[str, dict[str, dict[str, float | None]]]:
        """Per policy and metric: observed, simulated, change and relative change."""
        base = self.summaries[self.OBSERVED]
        out: dict[str, dict[str, dict[str, float | None]]] = {}
        for name in self.simulated:
            s = self.summaries[name]
            out[name] = {}
            for key, _label, unit, _better in COMPARED:
                a, b = float(base[key]), float(s[key])
                tiny = {"s": 1.0, "GPU-s": 360.0}.get(unit, 1e-9)  # no percentages of almost nothing
                out[name][key] = {"observed": a, "simulated": b, "change": b - a,
                                  "relative": (b - a) / abs(a) if abs(a) >= tiny else None}
        return out

    def as_json(self) -> dict[str, Any]:
        return {
            "window": {"since": self.since, "until": self.until, "observing_since": self.observing_since},
            "cluster": {"nodes": len(self.topology.nodes), "gpus": self.topology.num_gpus},
            "jobs": self.counts,
            "summaries": self.summaries,
            "differences": self.differences(),
            "user_mean_wait": {"slurm (observed)": user_mean_waits(self.observed),
                               **{n: user_mean_waits(r) for n, r in self.simulated.items()}},
            "placement_guessed": sorted(self.guessed),
            "notes": self.notes,
        }


def _finished(row: dict[str, Any]) -> bool:
    return row["state"] in _FINISHED and row["start"] is not None and row["end"] is not None and bool(row["nodes"])


def _gpu_ids(row: dict[str, Any], topo: Topology) -> tuple[tuple[int, ...], bool]:
    """Global GPU ids a job ran on: the recorded indices, else (guessed) the lowest indices
    on its nodes; ``(ids, guessed)``; ids empty when its nodes are not in the topology."""
    names = json.loads(row["gpu_names"]) if row["gpu_names"] else []
    ids: list[int] = []
    for name in names:
        node, _, idx = name.rpartition(":")
        if node in topo.node_index and idx.isdigit():
            try:
                ids.append(topo.gpu_id(node, int(idx)))
            except ValueError:
                pass
    if len(ids) == row["gpus"]:
        return tuple(sorted(ids)), False
    nodes = [n for n in json.loads(row["nodes"] or "[]") if n in topo.node_index]
    if not nodes:
        return (), True
    per = max(1, row["gpus"] // len(nodes))
    ids = []
    for n in nodes:
        ni = topo.node_index[n]
        base = int(topo.node_first_gpu[ni])
        ids.extend(base + i for i in range(min(per, topo.nodes[ni].num_gpus)))
    ids = ids[: row["gpus"]]
    return (tuple(sorted(ids)), True) if len(ids) == row["gpus"] else ((), True)


def build_report(rows: Sequence[dict[str, Any]], topology: Topology, policies: Sequence[Policy], *,
                 since: float | None = None, until: float | None = None, seed: int = 0,
                 meta: dict[str, str] | None = None) -> ShadowReport:
    """Observed Slurm vs the simulated policies on the jobs whose whole life was observed
    inside [since, until) (by submit time). ``ShadowError`` when no such job exists."""
    until = time.time() if until is None else until
    speed = SpeedModel(topology)
    lo = since if since is not None else -math.inf
    counts = {"observed": 0, "compared": 0, "unfinished": 0, "never_started": 0, "background": 0,
              "too_big": 0, "unplaceable": 0}
    background_gpu_s = 0.0
    observed: list[JobRecord] = []
    sim_jobs: list[SimJob] = []
    guessed: set[str] = set()
    for row in sorted(rows, key=lambda r: (r["submit"] or r["first_seen"], r["job_id"])):
        submit = row["submit"] if row["submit"] is not None else row["first_seen"]
        if not row["managed"]:
            if row["start"] is not None:
                end = row["end"] if row["end"] is not None else until
                s, e = max(row["start"], lo), min(end, until)
                if e > s:
                    counts["background"] += 1
                    background_gpu_s += (e - s) * row["gpus"]
            continue
        if not lo <= submit < until:
            if row["start"] is not None and row["start"] < until and (row["end"] or until) > lo:
                counts["background"] += 1  # running before the window opened
                s, e = max(row["start"], lo), min(row["end"] or until, until)
                background_gpu_s += max(0.0, e - s) * row["gpus"]
            continue
        counts["observed"] += 1
        if not _finished(row):
            counts["never_started" if row["state"] in _FINISHED else "unfinished"] += 1
            continue
        if row["end"] > until:
            counts["unfinished"] += 1
            continue
        if row["gpus"] > topology.num_gpus:
            counts["too_big"] += 1
            continue
        gpus, was_guessed = _gpu_ids(row, topology)
        if not gpus:
            counts["unplaceable"] += 1
            continue
        if was_guessed:
            guessed.add(row["job_id"])
        model = resolve_model(row["model"], row["job_id"], row["gpus"], seed)
        run = max(1.0, float(row["end"]) - float(row["start"]))
        ideal = run / max(1e-9, speed.slowdown(model, gpus))
        limit = row["time_limit"] if row["time_limit"] else modelled_limit(row["job_id"], ideal, seed)
        start = max(float(row["start"]), float(submit))
        observed.append(JobRecord(row["job_id"], row["user"], row["gpus"], model, float(submit), start, start + run,
                                  ideal, float(limit), gpus))
        shape = row["num_nodes"] if row["num_nodes"] and row["gpus"] % row["num_nodes"] == 0 else None
        sim_jobs.append(SimJob(TraceJob(row["job_id"], float(submit), row["user"], row["gpus"], ideal, model, 0,
                                        num_nodes=shape), float(limit), model))
    if not observed:
        raise ShadowError(
            f"no finished job in the window ({counts['observed']} observed arrivals: {counts['unfinished']} not finished "
            f"yet, {counts['never_started']} ended without starting); observe longer or widen --since")
    counts["compared"] = len(observed)
    base = min(j.job.submit_time for j in sim_jobs)
    sim_jobs = [dataclasses.replace(j, job=dataclasses.replace(j.job, submit_time=j.job.submit_time - base))
                for j in sim_jobs]
    summaries = {ShadowReport.OBSERVED: summarize(observed, topology.num_gpus)}
    simulated: dict[str, list[JobRecord]] = {}
    for policy in policies:
        result = Simulation(sim_jobs, topology, policy, speed=speed).run()
        recs = [JobRecord(r.job_id, r.user, r.num_gpus, r.model, r.submit_time + base, r.start_time + base,
                          r.end_time + base, r.ideal_duration, r.time_limit, r.gpus) for r in result.records]
        simulated[policy.name] = recs
        summaries[policy.name] = summarize(recs, topology.num_gpus)
    notes = [
        "the replay starts from an idle cluster at the first arrival and contains only the managed GPU jobs "
        "of the window; run times are the measured ones, re-priced for placement by the speed model",
    ]
    if background_gpu_s:
        notes.append(f"{counts['background']} job(s) outside the comparison (other partitions, or running when the "
                     f"window opened) used {background_gpu_s / 3600:.2f} GPU-h in reality but not in the replay")
    if guessed:
        notes.append(f"{len(guessed)} job(s) ended between two observations: their GPU indices are assumed "
                     "(lowest indices of their nodes)")
    if counts["unfinished"]:
        notes.append(f"{counts['unfinished']} job(s) of the window had not finished and are left out")
    report = ShadowReport(since, until, topology, observed, simulated, summaries, counts, notes, guessed)
    report.counts["background_gpu_hours"] = round(background_gpu_s / 3600, 3)  # type: ignore[assignment]
    if meta and meta.get("first_observation"):
        try:
            report.observing_since = float(meta["first_observation"])
        except ValueError:
            pass
    return report


# ---- writing ----------------------------------------------------------------------------------


def write_report(report: ShadowReport, out: str | os.PathLike[str]) -> list[Path]:
    """``report.json``, ``jobs.csv`` and ``shadow-report.png`` into ``out``, all or nothing
    (written in a temporary folder beside it, then moved in)."""

    def fill(tmp: Path) -> None:
        (tmp / "report.json").write_text(json.dumps(report.as_json(), indent=2) + "\n")
        _jobs_csv(report, tmp / "jobs.csv")
        plot(report, tmp / "shadow-report.png")

    return write_folder(Path(out), fill)


def _jobs_csv(report: ShadowReport, path: Path) -> None:
    topo = report.topology
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["scheduler", "job_id", "user", "num_gpus", "model", "submit_time", "start_time", "end_time", "wait",
                    "jct", "ideal_duration", "slowdown", "gpus", "placement_guessed"])
        sets: list[tuple[str, Iterable[JobRecord]]] = [(report.OBSERVED, report.observed), *report.simulated.items()]
        for name, recs in sets:
            for r in recs:
                w.writerow([name, r.job_id, r.user, r.num_gpus, r.model, f"{r.submit_time:.3f}", f"{r.start_time:.3f}",
                            f"{r.end_time:.3f}", f"{r.wait:.3f}", f"{r.jct:.3f}", f"{r.ideal_duration:.3f}",
                            f"{r.runtime / r.ideal_duration:.4f}", " ".join(topo.gpu_name(g) for g in r.gpus),
                            int(name == report.OBSERVED and r.job_id in report.guessed)])


def plot(report: ShadowReport, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(report.summaries)
    colors = ["#7f7f7f", "#1f77b4", "#2ca02c", "#d62728", "#9467bd"]
    fig, axes = plt.subplots(2, 3, figsize=(13, 7.5))
    panels = (("avg_jct", "avg JCT (s)"), ("avg_wait", "avg wait (s)"), ("jain_fairness", "wait fairness (Jain, 1 = fair)"),
              ("comm_cost", "comm cost (GPU-h)"))
    for ax, (key, title) in zip(axes.flat, panels):
        vals = [report.summaries[n][key] / (3600 if key == "comm_cost" else 1) for n in names]
        ax.bar(range(len(names)), vals, color=colors[: len(names)])
        ax.set_xticks(range(len(names)), names, rotation=15, fontsize=8)
        ax.set_title(title, fontsize=10)
        for i, v in enumerate(vals):
            ax.annotate(f"{v:.3g}", (i, v), ha="center", va="bottom", fontsize=8)
        ax.grid(axis="y", alpha=0.3)
    ax = axes.flat[4]
    sets = [(report.OBSERVED, report.observed), *report.simulated.items()]
    for (name, recs), color in zip(sets, colors):
        x = np.sort([r.jct for r in recs])
        ax.plot(np.maximum(x, 1.0), np.arange(1, len(x) + 1) / len(x), label=name, color=color)
    ax.set_xscale("log")
    ax.set_xlabel("JCT (s), log scale")
    ax.set_ylabel("fraction of jobs")
    ax.set_title("CDF of job completion time", fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    ax = axes.flat[5]
    users = sorted({r.user for _, recs in sets for r in recs})
    width = 0.8 / max(1, len(sets))
    for k, ((name, recs), color) in enumerate(zip(sets, colors)):
        waits = user_mean_waits(recs)
        ax.bar(np.arange(len(users)) + k * width, [waits.get(u, 0.0) for u in users], width, label=name, color=color)
    ax.set_xticks(np.arange(len(users)) + 0.4 - width / 2, users, rotation=30, ha="right", fontsize=8)
    ax.set_title("mean wait per user (s)", fontsize=10)
    ax.legend(fontsize=8)
    fig.suptitle(f"shadow report: {report.counts['compared']} jobs on {report.topology.num_gpus} GPUs, "
                 f"Slurm as observed vs attentived simulated", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
