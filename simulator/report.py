"""Write a replay to a folder: metrics.json, jobs.csv and PNG plots, all or nothing.

Files are written into a temporary folder beside the target and moved in only when all
of them exist, so an interrupted or failed run never leaves a half-written report.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np

from attentived.atomic import write_folder

from .metrics import user_mean_waits
from .replay import Replay


def write_report(rep: Replay, out: Path) -> list[Path]:
    def fill(tmp: Path) -> None:
        _metrics(rep, tmp / "metrics.json")
        _jobs(rep, tmp / "jobs.csv")
        _plots(rep, tmp)

    return write_folder(out, fill)


def _metrics(rep: Replay, path: Path) -> None:
    doc = rep.as_json()
    doc["seed"] = rep.seed
    doc["trace_path"] = rep.trace.path
    doc["details"] = {
        name: {
            **run.summary,
            "decisions": run.result.decisions,
            "decision_p50_ms": 1e3 * float(np.percentile(run.result.decision_seconds, 50)) if run.result.decisions else 0.0,
            "decision_p99_ms": 1e3 * float(np.percentile(run.result.decision_seconds, 99)) if run.result.decisions else 0.0,
            "wall_seconds": run.result.wall_seconds,
            "user_mean_wait": user_mean_waits(run.result.records),
        }
        for name, run in rep.runs.items()
    }
    path.write_text(json.dumps(doc, indent=2) + "\n")


def _jobs(rep: Replay, path: Path) -> None:
    topo = rep.topology
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["policy", "job_id", "user", "num_gpus", "model", "submit_time", "start_time", "end_time",
                    "wait", "jct", "ideal_duration", "time_limit", "slowdown", "nodes", "gpus"])
        for name, run in rep.runs.items():
            for r in run.result.records:
                nodes = sorted({topo.nodes[int(topo.gpu_node[g])].name for g in r.gpus})
                w.writerow([name, r.job_id, r.user, r.num_gpus, r.model, f"{r.submit_time:.3f}",
                            f"{r.start_time:.3f}", f"{r.end_time:.3f}", f"{r.wait:.3f}", f"{r.jct:.3f}",
                            f"{r.ideal_duration:.3f}", f"{r.time_limit:.0f}", f"{r.runtime / r.ideal_duration:.4f}",
                            ",".join(nodes), " ".join(topo.gpu_name(g) for g in r.gpus)])


def _plots(rep: Replay, folder: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    for metric, fname, label in (("jct", "cdf_jct.png", "job completion time (s)"), ("wait", "cdf_wait.png", "waiting time (s)")):
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for name, run in rep.runs.items():
            x = np.sort([getattr(r, metric) for r in run.result.records])
            ax.plot(np.maximum(x, 1.0), np.arange(1, len(x) + 1) / len(x), label=name)
        ax.set_xscale("log")
        ax.set_xlabel(label + ", log scale (values below 1 s drawn at 1 s)")
        ax.set_ylabel("fraction of jobs")
        ax.set_title(f"CDF of {label} - {rep.trace.name}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(folder / fname, dpi=110)
        plt.close(fig)

    users = sorted({r.user for run in rep.runs.values() for r in run.result.records})
    fig, ax = plt.subplots(figsize=(max(7, 0.5 * len(users) * max(1, len(rep.runs)) / 3), 4.5))
    width = 0.8 / max(1, len(rep.runs))
    for k, (name, run) in enumerate(rep.runs.items()):
        waits = user_mean_waits(run.result.records)
        ax.bar(np.arange(len(users)) + k * width, [waits.get(u, 0.0) for u in users], width, label=name)
    ax.set_xticks(np.arange(len(users)) + 0.4 - width / 2, users, rotation=45, ha="right", fontsize=8)
    ax.set_ylabel("mean waiting time (s)")
    ax.set_title(f"mean wait per user - {rep.trace.name}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(folder / "wait_per_user.png", dpi=110)
    plt.close(fig)
