"""Compare policies over traces and seeds, in parallel, with confidence intervals.

``attentived compare`` runs every (workload, policy, seed) as an independent replay in a
process pool. A *workload* is a trace cut to a window at a load scale; a *seed* draws the
modelled time limits and workload models of every job and seeds random placement, so each
seed is a different workload, the same for every policy. Each run's metrics come from
`summarize` (as in ``replay``) plus the decision time per call; across seeds a metric is
reported as its mean and the half-width of its 95% confidence interval from Student's t
with n - 1 degrees of freedom (none for one seed: say n=1). Results are keyed by
(workload, policy, seed) and do not depend on the number of workers or the order runs
finish in; decision times are wall-clock measurements and vary between machines.

Policies are named as for ``replay`` (`agents.registry.make_policy`): the one registry of
policies; a worker process rebuilds each policy from its name.

Workers are started with multiprocessing's "spawn" method (a fresh interpreter: no forked
copy of a parent's threads or torch state), which imports the caller's main module again in
each worker, so a script that calls `compare` must do so under ``if __name__ ==
"__main__":``. A run that raises, or a worker that dies (killed, out of memory, or such a
script's worker failing to start), stops every other worker and raises `RunError` naming
the run and how it ended: a comparison fails, it never hangs, and no worker outlives it.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import pickle
import signal
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from pathlib import Path

import numpy as np

from attentived.agents.registry import expand, make_policy, runnable
from attentived.agents.spec import BadPolicyName
from attentived.atomic import write_folder
from attentived.topology import Topology
from attentived.topology.speed import SpeedModel

from .engine import Simulation, prepare_jobs
from .metrics import SUMMARY_KEYS, summarize
from .pareto import curves, knobs, pareto_front, points
from .trace import Trace, check_fits

__all__ = [
    "METRICS",
    "CompareError",
    "Comparison",
    "RunError",
    "RunResult",
    "Stat",
    "Workload",
    "compare",
    "pareto_front",
    "load_workloads",
    "parse_window",
    "policy_names",
    "t_quantile",
    "write_outputs",
]


class CompareError(ValueError):
    """Bad input to a comparison (a window, a seed count, a policy that cannot load)."""


def policy_names(requested: Sequence[str], topology: Topology | None = None,
                 warn: Callable[[str], None] | None = None) -> list[str]:
    """Canonical names (`registry.expand`: ``all`` is every preset and learned policy; a
    policy named twice is a `CompareError`), in the order given. With ``topology``, a
    policy from ``all`` that cannot run there (a fixed-size network on a larger cluster)
    is dropped with a note to ``warn``; one named explicitly is a `CompareError`."""
    try:
        out = expand(requested)
        if topology is None:
            return out
        built = [make_policy(n) for n in out]
        kept, notes = runnable(out, built, set(expand([p for p in requested if p != "all"])), topology)
    except BadPolicyName as e:
        raise CompareError(str(e)) from None
    for note in notes:
        (warn or (lambda _: None))(note)
    return [n for n, p in zip(out, built) if any(p is k for k in kept)]


# ---- statistics ----


def t_quantile(p: float, df: int) -> float:
    """The ``p`` quantile of Student's t with ``df`` (integer >= 1) degrees of freedom.

    Inverts the closed-form CDF for integer degrees of freedom (Abramowitz & Stegun
    26.7.3-4) by bisection; exact to 1e-10, so 95% intervals need no SciPy.
    """
    if df < 1 or int(df) != df:
        raise ValueError(f"degrees of freedom must be a positive integer, got {df}")
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1), got {p}")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    target = 2.0 * p - 1.0  # P(|T| <= t)
    lo, hi = 0.0, 1.0
    while _t_central(hi, df) < target:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if _t_central(mid, df) < target:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12 * max(1.0, hi):
            break
    return 0.5 * (lo + hi)


def _t_central(t: float, df: int) -> float:
    """P(|T| <= t) for integer ``df``."""
    theta = math.atan(t / math.sqrt(df))
    s, c = math.sin(theta), math.cos(theta)
    if df % 2 == 1:
        total, term = 0.0, c
        for k in range(1, (df - 1) // 2 + 1):
            total += term
            term *= c * c * (2 * k) / (2 * k + 1)
        return 2.0 / math.pi * (theta + s * total) if df > 1 else 2.0 / math.pi * theta
    total, term = 0.0, 1.0
    for k in range(0, (df - 2) // 2 + 1):
        total += term
        term *= c * c * (2 * k + 1) / (2 * k + 2)
    return s * total


@dataclass(frozen=True)
class Stat:
    """Mean over seeds and the half-width of its 95% t interval (``None`` when n = 1)."""

    mean: float
    ci95: float | None
    n: int
    values: tuple[float, ...]

    @classmethod
    def of(cls, values: Sequence[float]) -> Stat:
        x = np.asarray(values, dtype=float)
        if len(x) == 0:
            raise ValueError("no values")
        if len(x) == 1:
            return cls(float(x[0]), None, 1, (float(x[0]),))
        half = t_quantile(0.975, len(x) - 1) * float(x.std(ddof=1)) / math.sqrt(len(x))
        return cls(float(x.mean()), half, len(x), tuple(float(v) for v in x))

    def as_json(self) -> dict:
        return {"mean": self.mean, "ci95": self.ci95, "n": self.n, "values": list(self.values)}


# ---- runs ----

#: Per-run metrics a comparison reports: the replay's, bounded slowdown, and decision times.
METRICS = (
    *[k for k in SUMMARY_KEYS if k != "jobs"],
    "bounded_slowdown",
    "decision_p50_ms",
    "decision_p99_ms",
    "decision_mean_ms",
)
TIMING_METRICS = ("decision_p50_ms", "decision_p99_ms", "decision_mean_ms")


@dataclass(frozen=True)
class Workload:
    """A trace as cut for the comparison (window and load scale already applied)."""

    label: str
    trace: Trace
    window: tuple[float | None, float | None] = (None, None)
    load_scale: float = 1.0

    def offered_load(self, num_gpus: int) -> float | None:
        """Requested GPU-seconds over (GPUs x the span of submissions); ``None`` when every
        job arrives at once."""
        jobs = self.trace.jobs
        span = jobs[-1].submit_time - jobs[0].submit_time if len(jobs) > 1 else 0.0
        work = sum(j.num_gpus * j.duration for j in jobs)
        return work / (num_gpus * span) if span > 0 else None

    def describe(self, num_gpus: int) -> dict:
        return {
            "label": self.label,
            "trace": self.trace.name,
            "path": self.trace.path,
            "window_seconds": list(self.window),
            "load_scale": self.load_scale,
            "jobs": len(self.trace.jobs),
            "offered_load": self.offered_load(num_gpus),
            "multi_gpu_fraction": float(np.mean([j.num_gpus > 1 for j in self.trace.jobs])),
        }


def parse_window(text: str) -> tuple[float | None, float | None]:
    """``"START:END"`` (either side may be empty) in `parse_duration` units: ``"40d:41d"``."""
    from .trace import parse_duration

    if ":" not in text:
        raise CompareError(f"--window {text!r}: expected START:END, e.g. 40d:41d or 36h: (either side may be empty)")
    a, _, b = text.partition(":")
    try:
        start = parse_duration(a) if a.strip() else None
        end = parse_duration(b) if b.strip() else None
    except ValueError as e:
        raise CompareError(f"--window {text!r}: {e}") from None
    if start is not None and end is not None and end <= start:
        raise CompareError(f"--window {text!r}: the end must be after the start")
    return start, end


def _seconds_label(x: float) -> str:
    for unit, size in (("d", 86_400), ("h", 3_600), ("m", 60)):
        if x >= size and x % size == 0 or x >= 10 * size:
            return f"{x / size:g}{unit}"
    return f"{x:g}s"


def load_workloads(
    paths: Sequence[str | os.PathLike[str]],
    windows: Sequence[str] = (),
    load_scale: float = 1.0,
) -> list[Workload]:
    """Each trace file cut to each window (the whole trace when no window is given)."""
    from .trace import load_trace

    if not (math.isfinite(load_scale) and load_scale > 0):
        raise CompareError(f"--load-scale must be a positive number (got {load_scale})")
    cuts = [parse_window(w) for w in windows] or [(None, None)]
    out = []
    for path in paths:
        for start, end in cuts:
            trace = load_trace(path, start=start, end=end, load_scale=load_scale)
            label = trace.name
            if (start, end) != (None, None):
                a = "" if start is None else _seconds_label(start)
                b = "" if end is None else _seconds_label(end)
                label += f"[{a}:{b}]"
            if load_scale != 1.0:
                label += f"x{load_scale:g}"
            out.append(Workload(label, trace, (start, end), load_scale))
    return out


@dataclass(frozen=True)
class _Task:
    workload: int
    policy: str
    seed: int


@dataclass(frozen=True)
class RunResult:
    """One replay: the metrics of `METRICS`, its decision count and wall time, and the
    sorted JCTs (for CDFs)."""

    workload: str
    policy: str
    seed: int
    metrics: dict[str, float]
    decisions: int
    wall_seconds: float
    jct: tuple[float, ...] = field(repr=False)


def _run(task: _Task, workload: Workload, topology: Topology) -> RunResult:
    policy = make_policy(task.policy, task.seed)
    jobs = prepare_jobs(workload.trace.jobs, task.seed)
    result = Simulation(jobs, topology, policy, speed=SpeedModel(topology)).run()
    summary = summarize(result.records, topology.num_gpus)
    ms = np.asarray(result.decision_seconds, dtype=float) * 1e3
    metrics = {k: float(summary[k]) for k in METRICS if k in summary}
    metrics["decision_p50_ms"] = float(np.percentile(ms, 50)) if len(ms) else 0.0
    metrics["decision_p99_ms"] = float(np.percentile(ms, 99)) if len(ms) else 0.0
    metrics["decision_mean_ms"] = float(ms.mean()) if len(ms) else 0.0
    jct = tuple(sorted(r.jct for r in result.records))
    return RunResult(workload.label, task.policy, task.seed, metrics, result.decisions, result.wall_seconds, jct)


class RunError(RuntimeError):
    """A run did not finish: its policy (or the simulation) raised, or the worker process
    running it died. `compare` stops every other run first, so nothing is left running."""


def _label(task: _Task, workloads: Sequence[Workload]) -> str:
    return f"{workloads[task.workload].label} / {task.policy} / seed {task.seed}"


def _run_or_fail(task: _Task, workloads: Sequence[Workload], topology: Topology) -> RunResult:
    try:
        return _run(task, workloads[task.workload], topology)
    except Exception as e:
        raise RunError(f"run {_label(task, workloads)} failed: {type(e).__name__}: {e}") from e


# ---- worker processes ----
#
# A small pool of our own rather than a ProcessPoolExecutor, for three things it does not
# give (Python 3.11): which run a dead worker was running and how it died; stopping the
# other runs at once; and a worker that dies while starting, before it has read its
# arguments, failing the comparison instead of hanging it (the spawn start method writes a
# process's arguments down a pipe whose reading end the parent itself holds open until the
# write ends: past the pipe's 64 KiB, a child that died blocks that write for ever). So a
# worker's arguments are only its end of a pipe; the workloads follow on the pipe, pickled
# once for all workers.


def _work(conn: Connection) -> None:
    """A worker: read the workloads and topology, say "ready", then answer each task with
    ("done", RunResult) or ("failed", summary, traceback) until the parent closes the pipe."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's: it stops the workers
    try:
        workloads, topology = conn.recv()
        conn.send(("ready",))
        while True:
            task = conn.recv()
            try:
                conn.send(("done", _run(task, workloads[task.workload], topology)))
            except Exception as e:
                conn.send(("failed", f"{type(e).__name__}: {e}", traceback.format_exc()))
    except (EOFError, OSError):  # the parent is done with this worker, or gone
        return


@dataclass
class _Worker:
    process: BaseProcess
    conn: Connection
    task: _Task | None = None
    ready: bool = False


def _run_in_workers(
    tasks: Sequence[_Task], workloads: Sequence[Workload], topology: Topology, workers: int,
    on_done: Callable[[RunResult], None] | None,
) -> dict[_Task, RunResult]:
    """Run ``tasks`` in that order on ``workers`` spawned processes; the first failure or
    death raises `RunError`, and no worker outlives the call."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    todo = list(reversed(tasks))
    pool: list[_Worker] = []
    results: dict[_Task, RunResult] = {}

    def give(w: _Worker) -> None:
        w.task = todo.pop() if todo else None
        if w.task is not None:
            _send(w, pickle.dumps(w.task), workloads)

    try:
        for _ in range(min(workers, len(tasks))):
            ours, theirs = ctx.Pipe()
            process = ctx.Process(target=_work, args=(theirs,), name="attentived-compare", daemon=True)
            process.start()
            theirs.close()  # so the worker's death reads as the end of the pipe
            pool.append(_Worker(process, ours))
        shared = pickle.dumps((tuple(workloads), topology), protocol=pickle.HIGHEST_PROTOCOL)
        for w in pool:
            _send(w, shared, workloads)
            give(w)
        while busy := [w for w in pool if w.task is not None]:
            ready = wait([w.conn for w in busy] + [w.process.sentinel for w in busy])
            for w in busy:
                if w.conn not in ready and w.process.sentinel not in ready:
                    continue
                try:
                    message = w.conn.recv() if w.conn.poll() else None
                except (EOFError, OSError):
                    message = None
                if message is None:
                    raise _died(w, workloads)
                if message[0] == "ready":
                    w.ready = True
                elif message[0] == "failed":
                    assert w.task is not None
                    error = RunError(f"run {_label(w.task, workloads)} failed in a worker process: {message[1]}")
                    error.add_note(f"the worker's traceback:\n{message[2].rstrip()}")
                    raise error
                else:
                    assert w.task is not None
                    results[w.task] = message[1]
                    if on_done:
                        on_done(message[1])
                    give(w)
    finally:
        for w in pool:
            w.conn.close()
            if w.process.is_alive():
                w.process.terminate()
            w.process.join()
    return results


def _send(w: _Worker, message: bytes, workloads: Sequence[Workload]) -> None:
    """One pickled message to a worker (what its ``conn.recv()`` reads); a broken pipe is
    its death."""
    try:
        w.conn.send_bytes(message)
    except OSError:
        raise _died(w, workloads) from None


def _died(w: _Worker, workloads: Sequence[Workload]) -> RunError:
    """The error for a worker that exited without answering (waits for it to be gone)."""
    w.process.join()
    code = w.process.exitcode
    how = f"exit code {code}"
    if code is not None and code < 0:
        how = f"killed by {signal.Signals(-code).name}" if -code in signal.valid_signals() else f"killed by signal {-code}"
    if w.ready:
        assert w.task is not None
        what = f"the worker process running {_label(w.task, workloads)} died ({how})"
    else:
        what = f"a worker process exited while starting ({how}), before running anything"
    if code == -signal.SIGKILL:
        return RunError(f"{what} (out of memory? the kernel's OOM killer sends SIGKILL)")
    if not w.ready:
        return RunError(
            f"{what}; its own error, if any, is on stderr above. compare starts its workers with multiprocessing's "
            "'spawn' method, which runs the calling script's main module again in each worker: a script that calls "
            "compare() must do so under `if __name__ == \"__main__\":` (see 'Safe importing of main module' in "
            "Python's multiprocessing docs)"
        )
    return RunError(what)


@dataclass(frozen=True)
class Comparison:
    topology: Topology
    workloads: tuple[Workload, ...]
    policies: tuple[str, ...]
    seeds: tuple[int, ...]
    runs: tuple[RunResult, ...]  # sorted by (workload, policy, seed) as given

    def stats(self) -> dict[str, dict[str, dict[str, Stat]]]:
        """workload label -> policy -> metric -> Stat over seeds."""
        out: dict[str, dict[str, dict[str, Stat]]] = {}
        for w in self.workloads:
            out[w.label] = {}
            for p in self.policies:
                runs = [r for r in self.runs if r.workload == w.label and r.policy == p]
                out[w.label][p] = {m: Stat.of([r.metrics[m] for r in runs]) for m in METRICS}
        return out

    def as_json(self) -> dict:
        topo = self.topology
        stats = self.stats()
        return {
            "cluster": {"nodes": len(topo.nodes), "gpus": topo.num_gpus},
            "seeds": list(self.seeds),
            "policies": list(self.policies),
            "workloads": [w.describe(topo.num_gpus) for w in self.workloads],
            "metrics": list(METRICS),
            "results": {
                w: {p: {m: s.as_json() for m, s in ms.items()} for p, ms in ps.items()} for w, ps in stats.items()
            },
            "pareto": {w: pareto_front(points(ps)) for w, ps in stats.items()},
            "knobs": {
                w: {base: {"settings": {f"{x:g}": name for x, name in curve.items()},
                           "versus": {v.other: v.as_json() for v in vs}}
                    for base, (curve, vs) in knobs(points(ps)).items()}
                for w, ps in stats.items()
            },
            "runs": [
                {"workload": r.workload, "policy": r.policy, "seed": r.seed, "decisions": r.decisions,
                 "wall_seconds": r.wall_seconds, **r.metrics}
                for r in self.runs
            ],
        }


def compare(
    workloads: Sequence[Workload],
    topology: Topology,
    policies: Sequence[str],
    seeds: Sequence[int],
    *,
    workers: int | None = None,
    on_done: Callable[[RunResult], None] | None = None,
) -> Comparison:
    """Run every (workload, policy, seed); ``workers`` processes (default: the CPU count,
    1 = in this process). ``on_done`` is called as runs finish (for a progress bar)."""
    if not workloads:
        raise CompareError("no trace to compare on")
    if not policies:
        raise CompareError("no policy to compare")
    if not seeds:
        raise CompareError("need at least one seed")
    labels = [w.label for w in workloads]
    if len(set(labels)) != len(labels):
        raise CompareError(f"workload labels repeat: {labels}")
    for w in workloads:
        check_fits(w.trace, topology.num_gpus)
    policies = list(dict.fromkeys(policies))
    for p in policies:  # a bad name or model file fails here, with its message, not in a worker
        make_policy(p, seeds[0])
    tasks = [_Task(wi, p, s) for wi in range(len(workloads)) for p in policies for s in seeds]
    workers = (os.cpu_count() or 1) if workers is None else workers
    if workers < 1:
        raise CompareError(f"workers must be at least 1 (got {workers})")
    if workers == 1 or len(tasks) == 1:
        results: dict[_Task, RunResult] = {}
        for t in tasks:
            results[t] = _run_or_fail(t, workloads, topology)
            if on_done:
                on_done(results[t])
    else:
        # Big workloads first, so the pool does not end waiting on one long run.
        ordered = sorted(tasks, key=lambda t: -len(workloads[t.workload].trace.jobs))
        results = _run_in_workers(ordered, workloads, topology, workers, on_done)
    runs = tuple(results[t] for t in tasks)
    return Comparison(topology, tuple(workloads), tuple(policies), tuple(seeds), runs)


# ---- files ----


def write_outputs(cmp: Comparison, out: Path) -> list[Path]:
    """compare.json, summary.csv, bars_<workload>.png, cdf_jct_<workload>.png and
    pareto_<workload>.png into ``out``, all or nothing (written beside it, then moved in)."""

    def fill(tmp: Path) -> None:
        (tmp / "compare.json").write_text(json.dumps(cmp.as_json(), indent=2) + "\n")
        (tmp / "summary.csv").write_text(_summary_csv(cmp))
        _plots(cmp, tmp)

    return write_folder(out, fill)


def _summary_csv(cmp: Comparison) -> str:
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["workload", "policy", "metric", "mean", "ci95", "n"])
    for wl, ps in cmp.stats().items():
        for p, ms in ps.items():
            for m, s in ms.items():
                w.writerow([wl, p, m, repr(s.mean), "" if s.ci95 is None else repr(s.ci95), s.n])
    return buf.getvalue()


#: Metrics drawn as bars, with their axis labels and a scale (seconds -> hours, ...).
BAR_METRICS = (
    ("avg_jct", "avg JCT (h)", 1 / 3600),
    ("p99_jct", "p99 JCT (h)", 1 / 3600),
    ("avg_wait", "avg wait (h)", 1 / 3600),
    ("jain_fairness", "Jain fairness (waits)", 1.0),
    ("max_user_wait", "worst user's mean wait (h)", 1 / 3600),
    ("jain_slowdown", "Jain fairness (slowdown)", 1.0),
    ("comm_cost", "comm cost (GPU-h)", 1 / 3600),
    ("makespan", "makespan (h)", 1 / 3600),
    ("decision_p50_ms", "decision p50 (ms)", 1.0),
)


def _slug(label: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in label).strip("_")


def _plots(cmp: Comparison, folder: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    stats = cmp.stats()
    names = list(cmp.policies)
    x = np.arange(len(names))
    for wl in cmp.workloads:
        cols = 4
        rows = -(-len(BAR_METRICS) // cols)
        fig, axes = plt.subplots(rows, cols, figsize=(max(12.0, 0.45 * len(names) * cols), 4.2 * rows), squeeze=False)
        for ax in axes.flat[len(BAR_METRICS):]:
            ax.set_visible(False)
        for ax, (metric, label, scale) in zip(axes.flat, BAR_METRICS):
            s = [stats[wl.label][p][metric] for p in names]
            err = [0.0 if v.ci95 is None else v.ci95 * scale for v in s]
            ax.bar(x, [v.mean * scale for v in s], yerr=err, capsize=3, color=[f"C{k % 10}" for k in range(len(names))])
            ax.set_title(label, fontsize=9)
            ax.set_xticks(x, names, rotation=60, ha="right", fontsize=7)
            ax.grid(axis="y", alpha=0.3)
        n = len(cmp.seeds)
        fig.suptitle(f"{wl.label}: mean over {n} seed(s)" + (", 95% t intervals" if n > 1 else " (n=1, no interval)"), fontsize=10)
        fig.tight_layout()
        fig.savefig(folder / f"bars_{_slug(wl.label)}.png", dpi=100)
        plt.close(fig)

        fig, ax = plt.subplots(figsize=(7, 4.5))
        for k, p in enumerate(names):
            jct = np.sort(np.concatenate([r.jct for r in cmp.runs if r.workload == wl.label and r.policy == p]))
            ax.plot(np.maximum(jct, 1.0), np.arange(1, len(jct) + 1) / len(jct), label=p, color=f"C{k % 10}",
                    linestyle="-" if k < 10 else "--")
        ax.set_xscale("log")
        ax.set_xlabel("job completion time (s), log scale; all seeds pooled")
        ax.set_ylabel("fraction of jobs")
        ax.set_title(f"CDF of JCT - {wl.label}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(folder / f"cdf_jct_{_slug(wl.label)}.png", dpi=100)
        plt.close(fig)

        _pareto_plot(stats[wl.label], names, wl.label, folder / f"pareto_{_slug(wl.label)}.png")


def _pareto_plot(per: dict[str, dict[str, Stat]], names: list[str], label: str, path: Path) -> None:
    """Avg JCT against the worst-off user's mean wait (left; the front joined in grey) and
    against Jain over users' slowdowns (right). A fairness knob run at several settings is
    one line through its points, each marked with its W."""
    import matplotlib.pyplot as plt

    front = set(pareto_front(points({p: per[p] for p in names})))
    lines = curves(names)
    on_curve = {name for c in lines.values() for name in c.values()}
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for ax, metric, ylabel in ((axes[0], "max_user_wait", "worst-off user's mean wait (h)"),
                               (axes[1], "jain_slowdown", "Jain over users' mean slowdown (higher is fairer)")):
        scale = 1 / 3600 if metric == "max_user_wait" else 1.0
        for k, p in enumerate(names):
            x_, y_ = per[p]["avg_jct"].mean / 3600, per[p][metric].mean * scale
            ax.scatter([x_], [y_], color=f"C{k % 10}", marker="o" if p in front else "x", s=40)
            if p not in on_curve:
                ax.annotate(p, (x_, y_), fontsize=7, xytext=(3, 3), textcoords="offset points",
                            fontweight="bold" if p in front else "normal")
        for k, (base, curve) in enumerate(lines.items()):
            xs = [per[n]["avg_jct"].mean / 3600 for n in curve.values()]
            ys = [per[n][metric].mean * scale for n in curve.values()]
            ax.plot(xs, ys, color=f"C{(k + 3) % 10}", linewidth=1.5, label=f"{base} over W")
            for w, x_, y_ in zip(curve, xs, ys):
                ax.annotate(f"W={w:g}", (x_, y_), fontsize=7, xytext=(3, -9), textcoords="offset points")
        if metric == "max_user_wait":
            pts = sorted((per[p]["avg_jct"].mean / 3600, per[p][metric].mean * scale) for p in front)
            ax.plot([a for a, _ in pts], [b for _, b in pts], color="0.5", linewidth=1, zorder=0)
        ax.set_xlabel("avg JCT (h)")
        ax.set_ylabel(ylabel, fontsize=8)
        ax.grid(alpha=0.3)
        if lines:
            ax.legend(fontsize=7)
    fig.suptitle(f"Efficiency vs fairness - {label} (o, bold: Pareto front of avg JCT and worst-off wait)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
