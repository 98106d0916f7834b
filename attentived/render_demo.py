"""Terminal and file output of ``attentived demo``: the live progress view, the side-by-side
table, and ``--out`` (demo.json, jobs.csv, Slurm's raw records, the daemon's log, plots)."""

from __future__ import annotations

import csv
import json
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from attentived.ops.demo.measure import relative_change
from attentived.ops.demo.runs import RUN_NAMES, RUN_TITLES, DemoResult

#: (label, summary key, format, lower is better)
ROWS: tuple[tuple[str, str, str, bool | None], ...] = (
    ("avg JCT", "avg_jct", "s", True),
    ("p99 JCT", "p99_jct", "s", True),
    ("avg wait", "avg_wait", "s", True),
    ("Jain fairness (users' waits)", "jain_fairness", "f3", False),
    ("worst user's mean wait", "max_user_wait", "s", True),
    ("Jain fairness (users' slowdown)", "jain_slowdown", "f3", False),
    ("comm. slowdown (multi-GPU)", "placement_slowdown", "x", True),
    ("makespan", "makespan", "s", True),
    ("GPU utilization", "utilization", "pct", False),
)


def _fmt(value: float | None, kind: str) -> str:
    if value is None:
        return "-"
    if kind == "s":
        return f"{value:.1f}s"
    if kind == "x":
        return f"{value:.3f}x"
    if kind == "pct":
        return f"{100 * value:.0f}%"
    return f"{value:.3f}"


def _console(stderr: bool = False) -> Console:
    console = Console(stderr=stderr)
    return console if console.is_terminal else Console(stderr=stderr, width=120)


# ---- the live view ------------------------------------------------------------------------------


class _View:
    """What the live view shows; ``event`` is the demo's ``on_event`` callback."""

    def __init__(self) -> None:
        self.header = Text("attentived demo: preparing the workload")
        self.rows: dict[str, dict[str, Any]] = {n: {"status": "waiting"} for n in RUN_NAMES}
        self.note = ""
        self.total = 0

    def event(self, kind: str, **data: Any) -> None:
        if kind == "workload":
            w = data["workload"]
            self.total = len(w.jobs)
            lo, hi = w.window_hours
            self.header = Text.from_markup(
                f"[bold]attentived demo[/]: {len(w.jobs)} Philly jobs (trace hours {lo:.0f}-{hi:.0f}, durations "
                f"/{w.time_scale:g}, offered load {w.offered_load:.1f}x) from {len(w.users)} users on 4 nodes x 8 GPUs; "
                f"attentived policy: [bold]{data['policy']}[/]")
        elif kind == "phase":
            run = data.get("run")
            if run in self.rows:
                self.rows[run]["status"] = data["text"]
            else:
                self.note = data["text"]
        elif kind == "progress":
            row = self.rows[data["run"]]
            row.update(data["counts"])
            row["elapsed"] = data["elapsed"]
        elif kind == "run_done":
            res = data["result"]
            self.rows[data["run"]]["status"] = "done" if res.complete else "done, with failed jobs"

    def render(self) -> Group:
        table = Table(box=None, pad_edge=False)
        for col in ("run", "status", "queued", "pending", "running", "done", "failed", "elapsed", ""):
            table.add_column(col, justify="left" if col in ("run", "status", "") else "right")
        for name in RUN_NAMES:
            r = self.rows[name]
            done = r.get("done", 0) + r.get("failed", 0)
            bar = ""
            if self.total and "elapsed" in r:
                width = 24
                fill = round(width * done / self.total)
                bar = "[green]" + "#" * fill + "[/][dim]" + "." * (width - fill) + "[/]"
            table.add_row(
                RUN_TITLES[name], r["status"], *(str(r[k]) if k in r else "" for k in ("queued", "pending", "running")),
                str(r["done"]) if "done" in r else "", str(r["failed"]) if r.get("failed") else ("0" if "done" in r else ""),
                f"{r['elapsed']:.0f}s" if "elapsed" in r else "", bar)
        parts: list[Any] = [self.header, table]
        if self.note:
            parts.append(Text(self.note, style="dim"))
        return Group(*parts)


@contextmanager
def live_view() -> Iterator[Callable[..., None]]:
    """A rich live view on stderr when it is a terminal; otherwise one line per phase."""
    view = _View()
    console = Console(stderr=True)
    if not console.is_terminal:
        def plain(kind: str, **data: Any) -> None:
            view.event(kind, **data)
            if kind == "phase":
                who = RUN_TITLES.get(data.get("run") or "", "demo")
                print(f"[{time.strftime('%H:%M:%S')}] {who}: {data['text']}", file=sys.stderr, flush=True)
            elif kind == "workload":
                print(view.header.plain, file=sys.stderr, flush=True)
            elif kind == "run_done":
                r = view.rows[data["run"]]
                print(f"[{time.strftime('%H:%M:%S')}] {RUN_TITLES[data['run']]}: {r.get('done', 0)} jobs done, "
                      f"{r.get('failed', 0)} failed in {r.get('elapsed', 0):.0f}s", file=sys.stderr, flush=True)

        yield plain
        return
    with Live(view.render(), console=console, refresh_per_second=4, transient=False) as live:
        def update(kind: str, **data: Any) -> None:
            view.event(kind, **data)
            live.update(view.render())

        yield update


# ---- the result -----------------------------------------------------------------------------------


def result_table(result: DemoResult, console: Console | None = None) -> None:
    console = console or _console()
    runs = result.runs
    a, b = runs["slurm"], runs["attentived"]
    w = result.workload
    table = Table(title=f"{len(w.jobs)} jobs, {len(w.users)} users, 4 nodes x 8 GPUs: live (Slurm's records) and sim",
                  title_justify="left")
    table.add_column("")
    table.add_column("Slurm alone", justify="right")
    table.add_column("sim", justify="right", style="dim")
    table.add_column(f"attentived ({b.policy})", justify="right")
    table.add_column("sim", justify="right", style="dim")
    table.add_column("change", justify="right")
    for label, key, kind, lower in ROWS:
        va, vb = a.summary.get(key), b.summary.get(key)
        change = ""
        if va is not None and vb is not None and lower is not None:
            if kind == "s" or kind == "x":
                base = va - 1.0 if kind == "x" else va
                diff = vb - va
                if kind == "x":
                    change = f"{diff:+.3f}x"
                elif base:
                    change = f"{100 * diff / base:+.0f}%"
            else:
                change = f"{vb - va:+.3f}" if kind == "f3" else f"{100 * (vb - va):+.0f} pts"
            better = (vb < va) if lower else (vb > va)
            worse = (vb > va) if lower else (vb < va)
            if change and better and abs(vb - va) > 1e-9:
                change = f"[green]{change}[/]"
            elif change and worse:
                change = f"[red]{change}[/]"
        table.add_row(label, _fmt(va, kind), _fmt(a.predicted.get(key), kind), _fmt(vb, kind),
                      _fmt(b.predicted.get(key), kind), change)
    console.print(table)
    errors = []
    for run in (a, b):
        cells = [f"{label} {_signed_pct(relative_change(run.summary.get(key), run.predicted.get(key)))}"
                 for label, key in (("avg JCT", "avg_jct"), ("avg wait", "avg_wait"))]
        errors.append(f"{run.title} {', '.join(cells)}")
    console.print(f"prediction error (sim / live - 1): {'; '.join(errors)}", highlight=False)
    d = b.daemon or {}
    for run in (a, b):
        bad = {n: s for n, s in run.states.items() if s != "COMPLETED"}
        line = (f"{run.title}: {sum(1 for s in run.states.values() if s == 'COMPLETED')}/{len(w.jobs)} jobs "
                f"completed in {run.wall_seconds:.0f}s; multi-GPU jobs split over more islands/nodes than needed: "
                f"{run.summary.get('split_more_than_needed', '-')} of {run.summary.get('multi_gpu_jobs', '-')}")
        if bad or run.missing:
            line += f" [red]not completed: {', '.join(f'{n} {s}' for n, s in bad.items()) or ''} {' '.join(run.missing)}[/]"
        console.print(line, highlight=False)
    if d:
        overtaken = d.get("overtaken_actions", 0)
        raced = f", {overtaken} overtaken: the job left the queue first" if overtaken else ""
        console.print(f"attentived: {d.get('cycles', 0)} cycles, {d.get('actions', 0)} Slurm updates "
                      f"({d.get('failed_actions', 0)} failed{raced}); placements as planned: {d.get('placements', {})}",
                      highlight=False)
    console.print(f"[dim]Total {result.wall_seconds:.0f}s. Live figures come from Slurm's own records (squeue --json: "
                  "whole seconds); 'sim' is the simulator's replay of the same workload (Slurm alone = the 'slurm' "
                  "preset). JCT = end - submit, wait = start - submit; comm. slowdown = the speed model's slowdown of "
                  "the GPUs each multi-GPU job got (what it slept); change = attentived vs Slurm alone, live.[/]",
                  highlight=False)


def _signed_pct(change: float | None) -> str:
    return "-" if change is None else f"{100 * change:+.0f}%"


def seeds_table(summary: dict[str, Any], console: Console | None = None) -> None:
    """``demo --seeds``: per seed, both runs' live avg JCT and the prediction errors, then the
    mean and spread over seeds."""
    console = console or _console()
    table = Table(title=f"attentived demo over seeds {', '.join(map(str, summary['seeds']))}", title_justify="left")
    table.add_column("seed")
    for name in RUN_NAMES:
        table.add_column(f"{RUN_TITLES[name]} avg JCT", justify="right")
        table.add_column("sim err JCT / wait", justify="right", style="dim")
    table.add_column("attentived vs Slurm alone", justify="right")
    for row in summary["per_seed"]:
        cells = [str(row["seed"])]
        for name in RUN_NAMES:
            r = row["runs"][name]
            cells += [_fmt(r["avg_jct"]["live"], "s"), " / ".join(_signed_pct(r[k]["error"]) for k in ("avg_jct", "avg_wait"))]
        cells.append(_signed_pct(row["jct_change"]))
        table.add_row(*cells)
    o = summary["overall"]

    def pct(s: dict[str, Any]) -> str:  # an error no seed could give (a live wait of 0) is "-"
        return "-" if s["mean"] is None else f"{100 * s['mean']:+.0f} ± {100 * s['std']:.0f}%"

    if o["jct_change"]["mean"] is not None:
        cells = ["mean ± std"]
        for name in RUN_NAMES:
            jct, ej, ew = o[f"{name}.avg_jct"], o[f"{name}.avg_jct.error"], o[f"{name}.avg_wait.error"]
            cells += [f"{jct['mean']:.1f} ± {jct['std']:.1f}s", f"{pct(ej)} / {pct(ew)}"]
        c = o["jct_change"]
        cells.append(f"{100 * c['mean']:+.0f} ± {100 * c['std']:.0f}%")
        table.add_row(*cells, style="bold")
    console.print(table)
    c = o["jct_change"]
    if c["mean"] is not None and len(summary["seeds"]) > 1:
        verdict = "larger than" if abs(c["mean"]) > c["std"] else "within"
        console.print(f"attentived's avg JCT change, {100 * c['mean']:+.1f}%, is {verdict} its seed-to-seed spread "
                      f"({100 * c['std']:.1f}%); worst prediction error {100 * (o['worst_prediction_error'] or 0):.0f}%",
                      highlight=False)


# ---- --out ------------------------------------------------------------------------------------------


def write_seeds(summary: dict[str, Any], out: Path) -> Path:
    """``demo --seeds --out``: the summary over seeds as seeds.json."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / "seeds.json"
    path.write_text(json.dumps(summary, indent=1, default=_jsonable))
    return path


def write_outputs(result: DemoResult, out: Path) -> list[Path]:
    """demo.json, jobs.csv, squeue-<run>.json (Slurm's raw records), slurmctld-<run>.log,
    attentived.log and PNG plots."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    path = out / "demo.json"
    path.write_text(json.dumps(result.as_json(), indent=1, default=_jsonable) + "\n")
    written.append(path)
    path = out / "jobs.csv"
    with path.open("w", newline="") as f:
        wr = csv.writer(f)
        wr.writerow(["run", "source", "job", "slurm_job_id", "state", "user", "gpus", "model", "submit", "start", "end",
                     "wait", "jct", "runtime", "ideal", "gpu_ids"])
        topo = result.topology
        for name, run in result.runs.items():
            for source, recs in (("live", run.records), ("predicted", run.predicted_records)):
                for r in recs:
                    wr.writerow([name, source, r.job_id, run.slurm_ids.get(r.job_id, "") if source == "live" else "",
                                 run.states.get(r.job_id, "") if source == "live" else "", r.user, r.num_gpus, r.model,
                                 f"{r.submit_time:.2f}", f"{r.start_time:.2f}", f"{r.end_time:.2f}", f"{r.wait:.2f}",
                                 f"{r.jct:.2f}", f"{r.runtime:.2f}", f"{r.ideal_duration:.2f}",
                                 " ".join(topo.gpu_name(g) for g in r.gpus)])
    written.append(path)
    for name, run in result.runs.items():
        for path, text in ((out / f"squeue-{name}.json", run.squeue_raw), (out / f"slurmctld-{name}.log", run.slurmctld_log)):
            if text:
                path.write_text(text)
                written.append(path)
    log = (result.runs.get("attentived") and (result.runs["attentived"].daemon or {}).get("log"))
    if log and Path(log).is_file():
        path = out / "attentived.log"
        shutil.copyfile(log, path)
        written.append(path)
    written += _plots(result, out)
    return written


def _jsonable(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"not JSON serializable: {type(value).__name__}")


def _plots(result: DemoResult, folder: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    written = []
    colors = {"slurm": "tab:blue", "attentived": "tab:orange"}
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, run in result.runs.items():
        for recs, style, what in ((run.records, "-", "live"), (run.predicted_records, "--", "sim")):
            x = np.sort([r.jct for r in recs])
            if len(x):
                ax.step(x, np.arange(1, len(x) + 1) / len(x), style, where="post", color=colors[name],
                        label=f"{run.title} ({what})")
    ax.set_xlabel("job completion time (s)")
    ax.set_ylabel("fraction of jobs")
    ax.set_title("JCT: live (Slurm's records) vs the simulator's prediction")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    written.append(folder / "jct_cdf.png")
    fig.savefig(written[-1], dpi=110)
    plt.close(fig)

    users = result.workload.users
    fig, ax = plt.subplots(figsize=(7, 4.5))
    bars: list[tuple[str, Any, str, str | None]] = [
        (run.title + " (live)", run.summary.get("user_mean_wait", {}), colors[n], None) for n, run in result.runs.items()]
    bars += [(run.title + " (sim)", run.predicted.get("user_mean_wait", {}), colors[n], "//") for n, run in result.runs.items()]
    width = 0.8 / len(bars)
    for k, (label, waits, color, hatch) in enumerate(bars):
        ax.bar(np.arange(len(users)) + k * width, [waits.get(u, 0.0) for u in users], width, label=label,
               color=color, alpha=0.5 if hatch else 0.9, hatch=hatch)
    ax.set_xticks(np.arange(len(users)) + 0.4 - width / 2, users)
    ax.set_ylabel("mean wait (s)")
    ax.set_title("mean wait per user")
    ax.legend(fontsize=8)
    fig.tight_layout()
    written.append(folder / "wait_per_user.png")
    fig.savefig(written[-1], dpi=110)
    plt.close(fig)

    topo = result.topology
    fig, axes = plt.subplots(len(result.runs), 1, figsize=(10, 3.2 * len(result.runs)), sharex=True)
    axes = np.atleast_1d(axes)
    ucolor = {u: c for u, c in zip(users, ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown"))}
    for ax, run in zip(axes, result.runs.values()):
        for r in run.records:
            slow = r.runtime / r.ideal_duration if r.ideal_duration else 1.0
            for g in r.gpus:
                ax.broken_barh([(r.start_time, r.runtime)], (g - 0.4, 0.8), facecolors=ucolor.get(r.user, "grey"),
                               edgecolors="red" if slow > 1.1 and r.num_gpus > 1 else "none", linewidth=0.8)
        for n in range(1, len(topo.nodes)):
            ax.axhline(int(topo.node_first_gpu[n]) - 0.5, color="black", linewidth=0.6)
        ax.set_yticks([int(topo.node_first_gpu[n]) + topo.nodes[n].num_gpus / 2 - 0.5 for n in range(len(topo.nodes))],
                      [nd.name for nd in topo.nodes])
        ax.set_ylim(-0.5, topo.num_gpus - 0.5)
        ax.invert_yaxis()
        ax.set_title(f"{run.title}: GPUs over time (colour = user, red edge = multi-GPU job slowed >10% by placement)",
                     fontsize=9)
    from matplotlib.patches import Patch

    axes[0].legend(handles=[Patch(color=ucolor[u], label=u) for u in users], loc="upper right", fontsize=8)
    axes[-1].set_xlabel("seconds since the run started")
    fig.tight_layout()
    written.append(folder / "timeline.png")
    fig.savefig(written[-1], dpi=110)
    plt.close(fig)
    return written
