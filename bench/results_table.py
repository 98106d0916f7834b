"""Regenerate the main results table of docs/results.md with `attentived compare`.

Workloads (none from Philly days [0, 40): [0, 30) trains the agents, [30, 40) validates
them and tuned the meta-heuristics):

* ``tiresias-60``: the Tiresias simulator's 60-job list on 2 nodes x 8 GPUs;
* three days of the Philly dev trace at their own arrival times on 16 nodes x 8 GPUs,
  at three offered loads: day 40 (1,494 jobs, light), day 48 (1,396, heavy), day 50
  (1,432, heaviest);
* ``synthetic-multigpu``: 800 jobs from `simulator.synthetic` (80% multi-GPU, 60% with 4+
  GPUs; generator seed 0, offered load 1.1) on the same 16 x 8 cluster.

Every policy `attentived compare --policy all` knows (every preset, the meta-heuristics,
and the attentive agent / DRL baselines once their checkpoints ship) plus
``sjf+consolidate+backfill``, 3 seeds each (seed = modelled time limits, workload models
and random placement). The table goes between the ``results:begin``/``results:end``
markers of docs/results.md; the discussion around it is written by hand. Each cluster's
comparison (compare.json, summary.csv, bar and CDF plots) goes to ``--out``.

    .venv/bin/python bench/results_table.py                 # 3.5-5.5 minutes on 2 shared cores
    .venv/bin/python bench/results_table.py --seeds 1 --quick   # smoke run, no docs update
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "results.md"
BEGIN, END = "<!-- results:begin -->", "<!-- results:end -->"
KNOB_SETTINGS = (0.0, 0.5, 1.0)
KNOBS = ("portfolio",)
EXTRA_POLICIES = ("sjf+consolidate+backfill", *(f"{k}:fairness={w:g}" for k in KNOBS for w in KNOB_SETTINGS))
"""Besides `all`: backfilled SJF, and each fairness knob over its range (the curve that
`versus` checks against every other policy)."""
PHILLY_WINDOWS = ("40d:41d", "48d:49d", "50d:51d")
SYNTHETIC: dict[str, Any] = dict(num_jobs=800, cluster_gpus=128, load=1.1, seed=0)

#: (column, metric, format)
COLUMNS = (
    ("avg JCT (h)", "avg_jct", "h"),
    ("p99 JCT (h)", "p99_jct", "h"),
    ("avg wait (h)", "avg_wait", "h"),
    ("Jain wait", "jain_fairness", "3"),
    ("worst user wait (h)", "max_user_wait", "h"),
    ("Jain slowdown", "jain_slowdown", "3"),
    ("comm (GPU-h)", "comm_cost", "gpuh"),
    ("makespan (d)", "makespan", "d"),
    ("decision p50 / p99 (ms)", None, "ms"),
)


def groups(out: Path, quick: bool):
    """(name, cluster args, workload sources) per cluster shape."""
    from attentived.simulator.samples import sample_path
    from attentived.simulator.synthetic import generate, write_trace

    syn = write_trace(out / "synthetic-multigpu.csv", generate(**{**SYNTHETIC, "num_jobs": 200 if quick else SYNTHETIC["num_jobs"]}))
    philly = sample_path("philly")
    windows = PHILLY_WINDOWS[:1] if quick else PHILLY_WINDOWS
    return [
        ("tiresias", dict(nodes=2, gpus_per_node=8, nodes_per_switch=2), [(sample_path("tiresias-60"), [])]),
        ("philly-synthetic", dict(nodes=16, gpus_per_node=8, nodes_per_switch=4), [(philly, list(windows)), (syn, [])]),
    ]


def command(cluster: dict, sources, policies, seeds: int, out: Path) -> str:
    """The `attentived compare` command line equivalent to one group."""
    args = ["attentived", "compare"]
    for path, windows in sources:
        p = Path(path)
        if p.name == "tiresias-60.csv":
            args += ["--sample", "tiresias-60"]
        elif p.name.startswith("philly-2017"):
            args += ["--sample", "philly"]
        else:
            args += ["--trace", str(p.relative_to(ROOT)) if p.is_relative_to(ROOT) else str(p)]
        for w in windows:
            args += ["--window", w]
    args += ["--nodes", str(cluster["nodes"]), "--gpus-per-node", str(cluster["gpus_per_node"]),
             "--nodes-per-switch", str(cluster["nodes_per_switch"])]
    args += ["--policy", "all"] + [a for p in EXTRA_POLICIES for a in ("--policy", p)]
    args += ["--seeds", str(seeds), "--out", str(out.relative_to(ROOT)) if out.is_relative_to(ROOT) else str(out)]
    return shlex.join(args)


def fmt(kind: str, s) -> str:
    scale = {"h": 1 / 3600, "gpuh": 1 / 3600, "d": 1 / 86400}.get(kind, 1.0)
    digits = 3 if kind == "3" else (1 if kind == "gpuh" else 2)
    text = f"{s.mean * scale:.{digits}f}"
    if s.ci95 is not None:
        text += f" ± {s.ci95 * scale:.{digits}f}"
    return text


def markdown(cmp_result, cluster_text: str) -> str:
    stats = cmp_result.stats()
    topo = cmp_result.topology
    lines = []
    for wl in cmp_result.workloads:
        d = wl.describe(topo.num_gpus)
        lines.append(
            f"#### {wl.label}: {d['jobs']} jobs, {100 * d['multi_gpu_fraction']:.0f}% multi-GPU, "
            f"offered load {'n/a' if d['offered_load'] is None else format(d['offered_load'], '.2f')} on {cluster_text}"
        )
        lines.append("")
        lines.append("| policy | " + " | ".join(c for c, _, _ in COLUMNS) + " |")
        lines.append("|---|" + "---:|" * len(COLUMNS))
        per = stats[wl.label]
        best = {}
        for _, m, _kind in COLUMNS:
            if m is None:
                continue
            vals = [per[p][m].mean for p in cmp_result.policies]
            best[m] = max(vals) if m in ("jain_fairness", "jain_slowdown") else min(vals)
        for p in cmp_result.policies:
            cells = []
            for _, m, kind in COLUMNS:
                if m is None:
                    cells.append(f"{per[p]['decision_p50_ms'].mean:.2f} / {per[p]['decision_p99_ms'].mean:.2f}")
                    continue
                text = fmt(kind, per[p][m])
                cells.append(f"**{text}**" if per[p][m].mean == best[m] else text)
            lines.append(f"| {p} | " + " | ".join(cells) + " |")
        lines.append("")
        lines += knob_lines(per, list(cmp_result.policies))
    return "\n".join(lines)


def knob_lines(per: dict, policies: list[str]) -> list[str]:
    """Per fairness knob: for every other policy, the settings W that are at least as fast
    and protect the worst-off user at least as well, or the closest W and its shortfall."""
    from attentived.simulator.pareto import knobs, points

    lines = []
    for base, (curve, rivals) in knobs(points({p: per[p] for p in policies})).items():
        lines.append(f"{base} over W = {', '.join(f'{w:g}' for w in curve)} against every other policy "
                     "(avg JCT and worst user wait both at most the other's):")
        lines.append("")
        lines.append("| other policy | covered by |")
        lines.append("|---|---|")
        for v in rivals:
            lines.append(f"| {v.other} | {v.describe()} |")
        lines.append("")
    return lines


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--policy", action="append", default=None, help="instead of all (repeatable)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "table")
    ap.add_argument("--quick", action="store_true", help="one Philly day, 200 synthetic jobs; docs untouched")
    a = ap.parse_args(argv)

    from attentived.simulator import compare as cmp
    from attentived.topology import uniform

    out = a.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    policies = cmp.policy_names(a.policy or ["all", *EXTRA_POLICIES])
    syn_rel = (out / "synthetic-multigpu.csv").relative_to(ROOT) if out.is_relative_to(ROOT) else out / "synthetic-multigpu.csv"
    sections = []
    commands = [
        f".venv/bin/python -m attentived.simulator.synthetic {syn_rel} --jobs {SYNTHETIC['num_jobs']} "
        f"--gpus {SYNTHETIC['cluster_gpus']} --load {SYNTHETIC['load']} --seed {SYNTHETIC['seed']}"
    ]
    t0 = time.time()
    for name, cluster, sources in groups(out, a.quick):
        topo = uniform(cluster["nodes"], cluster["gpus_per_node"], nodes_per_switch=cluster["nodes_per_switch"])
        workloads = [w for path, windows in sources for w in cmp.load_workloads([path], windows)]
        t = time.time()
        done: list[cmp.RunResult] = []

        def report(r: cmp.RunResult, done: list[cmp.RunResult] = done) -> None:
            done.append(r)
            print(f"  {len(done):3d} {r.workload} {r.policy} seed {r.seed}: {r.wall_seconds:.1f}s", file=sys.stderr, flush=True)

        res = cmp.compare(workloads, topo, policies, list(range(a.seeds)), workers=a.workers, on_done=report)
        cmp.write_outputs(res, out / name)
        print(f"{name}: {time.time() - t:.0f}s", file=sys.stderr)
        cluster_text = f"{cluster['nodes']} nodes x {cluster['gpus_per_node']} GPUs"
        sections.append(markdown(res, cluster_text))
        commands.append(command(cluster, sources, policies, a.seeds, out / name))
    elapsed = time.time() - t0
    body = "\n".join(sections)
    print(body)
    print(f"total {elapsed:.0f}s", file=sys.stderr)
    if a.quick:
        return
    block = "\n".join([
        BEGIN,
        f"<!-- generated by bench/results_table.py in {elapsed / 60:.1f} min; do not edit by hand -->",
        "",
        f"Mean over {a.seeds} seeds ± the half-width of the 95% t interval; **bold** = best mean in the column "
        "(lower is better, except the Jain indices). Jain wait = over users' mean waits (scale-free: it rewards "
        "everyone waiting equally long, docs/simulator.md); worst user wait = the worst-off user's mean wait; "
        "Jain slowdown = over users' mean (wait + run) / max(run, 10 s). Equivalent commands:",
        "",
        "```bash",
        *commands,
        "```",
        "",
        body,
        END,
    ])
    text = DOC.read_text()
    if BEGIN in text and END in text:
        text = text[: text.index(BEGIN)] + block + text[text.index(END) + len(END):]
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    DOC.write_text(text)
    print(f"updated {DOC}", file=sys.stderr)


if __name__ == "__main__":
    main()
