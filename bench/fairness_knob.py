"""The look-ahead policies' fairness knob W against the heuristics, on held-out days.

Issue 14: ``portfolio``/``genetic``/``annealing`` take ``fairness=W`` in [0, 1] (0 =
completion time only, 1 = protect the worst-off users as much as the look-ahead can).
What the knob must move is ``max_user_wait`` (the worst user's mean wait) while keeping
the average JCT low. This bench replays windows of 1,000 consecutive jobs from Philly
days [40, 60) (never the training days [0, 30) or the validation days [30, 40); ``--days
30:40`` takes the validation days instead, to choose between checkpoints), re-timed to offer 1.1x the capacity
of a 16-node x 8-GPU cluster (the ``matched`` setting of ``bench/agents_quality.py``; its
first four windows are the same), under ``portfolio`` at each W, under ``genetic`` and
``annealing`` at a few W (``--genetic``, ``--annealing``: they are slower), and under the
reference heuristics sjf+consolidate, tiresias, fair-share+consolidate and fifo. Each
(window, seed) pair replays every policy on the same modelled time limits and models
(the seed draws them, and the searches' streams).

It reports, per policy, the mean and the spread (min / max over windows x seeds) of
avg_jct, max_user_wait and jain_slowdown, the geometric mean over runs of avg_jct and
max_user_wait relative to sjf+consolidate on the same run (windows differ by 10x in
congestion, so the plain mean is dominated by the most congested one), and a per-window
table. Writes bench/results/fairness_knob.json.

    .venv/bin/python bench/fairness_knob.py [--quick] [--windows N] [--skip N] [--genetic 0.5,1] [--annealing 1]
        [--policy NAME ...] [--out FILE]   # NAME e.g. attentive:model=runs/a/best.pt,fairness=1
    .venv/bin/python bench/fairness_knob.py --merge PART.json ... --out FILE   # join runs, recompute the summary
    .venv/bin/python bench/fairness_knob.py --days 30:40 --fairness "" --policy attentive:model=CKPT ...
        # the same on the training's validation days: choose between checkpoints there, then
        # measure the chosen one on the held-out days

The committed results come from ``--windows 16 --genetic 0.5,0.75,1 --annealing 0.75,1
--before RUNS.json``, where RUNS.json held the same windows and seeds replayed by
``portfolio``, ``genetic`` and ``annealing`` at the commit before the knob (their cost's
fairness term was 2 x (1 - Jain over users' mean waits)): the rows named "(before)".
About 15 minutes on one core.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

RESULTS = Path(__file__).parent / "results" / "fairness_knob.json"
VALIDATION_RESULTS = RESULTS.with_name("fairness_knob_validation.json")
KEYS = ("avg_jct", "max_user_wait", "jain_slowdown", "avg_wait", "p99_jct", "jain_fairness", "comm_cost", "users")
HEURISTICS = ("sjf+consolidate", "tiresias", "fair-share+consolidate", "fifo")
REFERENCE = "sjf+consolidate"
LEVELS = (0.0, 0.25, 0.5, 0.75, 1.0)
HELD_OUT = (40.0, 60.0)  # never trained or validated on
VALIDATION = (30.0, 40.0)  # the training's validation days
DAYS = {"40:60": HELD_OUT, "30:40": VALIDATION}


def matched_windows(count: int, skip: int = 0, days: tuple[float, float] = HELD_OUT, load: float = 1.1):
    """``count`` windows of 1,000 jobs from ``days`` at ``load`` on 16 x 8 GPUs (on the
    held-out days, the same stream as bench/agents_quality.py: its windows are the first
    four here)."""
    from attentived.simulator.samples import sample_path
    from attentived.simulator.trace import Trace, load_trace
    from attentived.topology import uniform
    from attentived.training.gym_env import TraceWindows

    philly = load_trace(sample_path("philly"))
    sampler = TraceWindows(philly, days=days, jobs=(1000, 1000), nodes=(16,), load=(load, load))
    rng = np.random.default_rng(2024)
    kind = "heldout" if days == HELD_OUT else f"days-{days[0]:g}-{days[1]:g}"
    out = []
    for k in range(skip + count):
        ep = sampler(rng)
        if k < skip:
            continue
        out.append(Trace(f"philly-{kind}-{k}", philly.path, philly.format, tuple(s.job for s in ep.jobs)))
    return uniform(16, 8, nodes_per_switch=2), out


def default_out(days: tuple[float, float]) -> Path:
    return RESULTS if days == HELD_OUT else VALIDATION_RESULTS


def stats(values: list[float]) -> dict[str, float]:
    return {"mean": float(np.mean(values)), "min": float(np.min(values)), "max": float(np.max(values))}


def gmean(values: list[float]) -> float:
    return float(math.exp(np.mean(np.log(np.maximum(values, 1e-12)))))


def main(extra: dict[str, Callable[[int], Any]] | None = None, argv: list[str] | None = None) -> None:
    """``extra``: more policies, by the name they report under, each built from a seed
    (`bench/ensemble_knob.py`'s ensembles, which no policy name can spell)."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="2 windows, seed 0, W in {0, 0.5, 1}")
    ap.add_argument("--windows", type=int, default=8, help="number of windows (default 8)")
    ap.add_argument("--skip", type=int, default=0, help="skip the first N windows of the stream (fresh windows)")
    ap.add_argument("--days", default="40:60", choices=DAYS,
                    help="Philly days the windows come from: 40:60, held out (default), or 30:40, the training's "
                         "validation days, to choose between checkpoints without looking at held-out data")
    ap.add_argument("--load", type=float, default=1.1,
                    help="offered load the windows are re-timed to, as a multiple of the cluster's capacity (default 1.1)")
    ap.add_argument("--seeds", default="0,1", help="comma-separated seeds (default 0,1)")
    ap.add_argument("--fairness", default=",".join(f"{w:g}" for w in LEVELS), help="portfolio's W levels")
    ap.add_argument("--genetic", default="", help="W levels for genetic (slower), e.g. 0.5,1; empty: none")
    ap.add_argument("--annealing", default="", help="W levels for annealing (slower), e.g. 0.75,1; empty: none")
    ap.add_argument("--default", action="store_true", help="also run portfolio at the class default W")
    ap.add_argument("--policy", action="append", default=[],
                    help="another policy to run (repeatable), e.g. attentive:model=runs/a/best.pt,fairness=0.5")
    ap.add_argument("--out", default=None,
                    help=f"JSON to write (default {RESULTS.relative_to(RESULTS.parents[2])}, or {VALIDATION_RESULTS.name} "
                         "beside it with --days 30:40)")
    ap.add_argument("--before", default=None,
                    help="JSON of runs of the same windows and seeds by the code before the knob ({name: [run rows]}), "
                         "summarised as extra rows named 'NAME (before)'")
    ap.add_argument("--merge", nargs="+", default=None, metavar="JSON",
                    help="join these outputs of runs on disjoint windows into one report (--out); runs nothing")
    args = ap.parse_args(argv)
    if args.load <= 0:
        ap.error(f"--load must be positive (got {args.load:g})")
    if args.merge:
        merge(args.merge, Path(args.out) if args.out else None)
        return

    from attentived.agents.registry import expand, make_policy
    from attentived.simulator.replay import replay

    n_windows = 2 if args.quick else args.windows
    seeds = (0,) if args.quick else tuple(int(s) for s in args.seeds.split(","))
    levels = (0.0, 0.5, 1.0) if args.quick else tuple(float(x) for x in args.fairness.split(",") if x)
    genetic = tuple(float(x) for x in args.genetic.split(",")) if args.genetic else ()
    annealing = tuple(float(x) for x in args.annealing.split(",")) if args.annealing else ()
    days = DAYS[args.days]
    topo, traces = matched_windows(n_windows, args.skip, days, args.load)

    names = list(HEURISTICS) + (["portfolio"] if args.default else [])
    names += [f"{kind}:fairness={w:g}" for kind, ws in (("portfolio", levels), ("genetic", genetic), ("annealing", annealing))
              for w in ws]
    names = expand(names + args.policy)

    def policies(seed: int):
        built = [make_policy(n, seed=seed) for n in names]
        for name, make in (extra or {}).items():
            built.append(make(seed))
            built[-1].name = name
        return built

    runs: dict[str, list[dict[str, Any]]] = {}
    t_start = time.perf_counter()
    for trace in traces:
        for seed in seeds:
            t0 = time.perf_counter()
            result = replay(trace, topo, policies(seed), seed=seed)
            for name, run in result.runs.items():
                row = {k: float(run.summary[k]) for k in KEYS}
                row["window"], row["seed"] = trace.name, seed
                runs.setdefault(name, []).append(row)
            print(f"  {trace.name} seed {seed}: {time.perf_counter() - t0:.0f} s", flush=True)
    if args.before:
        wanted = {(t.name, s) for t in traces for s in seeds}
        for name, rows in json.loads(Path(args.before).read_text()).items():
            rows = sorted((r for r in rows if (r["window"], r["seed"]) in wanted), key=lambda r: (r["window"], r["seed"]))
            if len(rows) == len(wanted):
                runs[f"{name} (before)"] = rows
    report(runs, [t.name for t in traces], list(seeds), {"nodes": len(topo.nodes), "gpus": topo.num_gpus},
           time.perf_counter() - t_start, Path(args.out) if args.out else default_out(days), days, args.load)


def merge(paths: list[str], out: Path | None) -> None:
    """One report from several outputs of this bench: runs on disjoint windows (``--skip``,
    e.g. two halves run at once on two cores) and runs of other policies on the same
    windows are joined, and the summary recomputed. A policy is kept when it has a run for
    every window and seed of the whole (its summary would cover other runs than the rest's)."""
    docs = [json.loads(Path(p).read_text()) for p in paths]
    windows = list(dict.fromkeys(w for d in docs for w in d["windows"]))
    seeds = sorted({s for d in docs for s in d["seeds"]})
    rows: dict[str, dict[tuple[str, int], dict[str, Any]]] = {}
    for d in docs:
        for name, rs in d["runs"].items():
            rows.setdefault(name, {}).update({(r["window"], r["seed"]): r for r in rs})
    whole = {(w, s) for w in windows for s in seeds}
    runs = {name: list(rs.values()) for name, rs in rows.items() if set(rs) == whole}
    settings = {(tuple(d.get("days", HELD_OUT)), d["load"]) for d in docs}
    if len(settings) > 1:
        raise SystemExit(f"cannot merge runs on different days or loads: {sorted(settings)}")
    days, load = settings.pop()
    report(runs, windows, seeds, docs[0]["cluster"], sum(d["wall_s"] for d in docs), out or default_out(days), days, load)


def report(runs: dict[str, list[dict[str, Any]]], windows: list[str], seeds: list[int], cluster: dict[str, int],
           wall_s: float, out: Path, days: tuple[float, float], load: float) -> None:
    """Print the summary and per-window tables of ``runs`` and write them as JSON to ``out``."""
    from attentived.agents.objective import DEFAULT_FAIRNESS

    per_window: dict[str, dict[str, dict[str, float]]] = {}
    for name in runs:  # the same (window, seed) order in every list
        runs[name].sort(key=lambda r: (windows.index(r["window"]), r["seed"]))
    names = list(runs)
    ref = runs[REFERENCE]
    summary: dict[str, dict[str, Any]] = {}
    for name in names:
        rs = runs[name]
        summary[name] = {k: stats([r[k] for r in rs]) for k in ("avg_jct", "max_user_wait", "jain_slowdown", "avg_wait", "p99_jct")}
        summary[name]["jct_vs_sjf"] = gmean([r["avg_jct"] / b["avg_jct"] for r, b in zip(rs, ref)])
        summary[name]["max_user_wait_vs_sjf"] = gmean([r["max_user_wait"] / b["max_user_wait"] for r, b in zip(rs, ref)])
    for name in names:
        per_window[name] = {}
        for w in windows:
            rs = [r for r in runs[name] if r["window"] == w]
            per_window[name][w] = {k: float(np.mean([r[k] for r in rs])) for k in ("avg_jct", "max_user_wait", "jain_slowdown")}

    print(f"\n{len(windows)} window(s) x seeds {seeds}, 1,000 jobs each, 16x8 GPUs, load {load:g}, "
          f"Philly days [{days[0]:g}, {days[1]:g})" + (" (validation days)" if days == VALIDATION else ""))
    print("mean [min, max] over windows x seeds; 'x sjf' = geometric mean of the ratio to sjf+consolidate per run")
    print(f"{'policy':<26}{'avg JCT h':>22}{'x sjf':>7}{'max user wait h':>24}{'x sjf':>7}{'Jain slowdown':>22}")
    for name in names:
        s = summary[name]
        j, m, f = s["avg_jct"], s["max_user_wait"], s["jain_slowdown"]
        print(f"{name:<26}{j['mean'] / 3600:>8.2f} [{j['min'] / 3600:5.2f},{j['max'] / 3600:6.2f}]{s['jct_vs_sjf']:>7.3f}"
              f"{m['mean'] / 3600:>9.2f} [{m['min'] / 3600:5.2f},{m['max'] / 3600:7.2f}]{s['max_user_wait_vs_sjf']:>7.3f}"
              f"{f['mean']:>9.3f} [{f['min']:.3f},{f['max']:.3f}]")
    print("\nper window (mean over seeds): avg JCT h / max user wait h")
    print(f"{'policy':<26}" + "".join(f"{w.split('-')[-1]:>14}" for w in windows))
    for name in names:
        print(f"{name:<26}" + "".join(
            f"{per_window[name][w]['avg_jct'] / 3600:>6.2f}/{per_window[name][w]['max_user_wait'] / 3600:<7.2f}" for w in windows))
    doc = {
        "benchmark": "fairness_knob", "days": list(days), "windows": windows,
        "jobs_per_window": 1000, "cluster": cluster, "load": load,
        "seeds": seeds, "reference": REFERENCE, "default_fairness": DEFAULT_FAIRNESS,
        "summary": summary, "per_window": per_window, "runs": runs,
        "wall_s": wall_s,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
