"""The attentive models on a 64-node cluster under load: does training to 64-128 nodes help?

Issue 14 asks the curriculum to reach 64-128 nodes; the shipped model trained up to 32
(`training/recipes/attentive-frontier.toml` adds the larger stage). ``bench/agents_quality.py``'s
``natural`` setting runs 64 nodes at the trace's own arrival times, where waits are a few
percent of a job's time and no policy can differ much. This one re-times windows of
``--jobs`` consecutive jobs from the held-out days [40, 60) to offer ``--load`` times the
capacity of ``--nodes`` x 8 GPUs (4 nodes a leaf switch), and replays each window and seed
(the seed draws time limits and models; every policy sees the same) under every ``--policy``.
Prints the mean per policy of avg JCT, the worst-off user's mean wait, Jain over users' mean
slowdowns and communication cost, each also as the geometric mean over runs of its ratio
to the first policy, and writes bench/results/large_cluster.json.

    .venv/bin/python bench/large_cluster.py --policy attentive \\
        --policy attentive:model=runs/front1/final.pt --policy sjf+consolidate --policy fifo+consolidate
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).parent / "results" / "large_cluster.json"
KEYS = ("avg_jct", "max_user_wait", "jain_slowdown", "comm_cost")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--policy", action="append", required=True, help="a policy name (repeatable); the first is the reference")
    ap.add_argument("--nodes", type=int, default=64)
    ap.add_argument("--jobs", type=int, default=4000, help="jobs per window (default 4000)")
    ap.add_argument("--windows", type=int, default=3)
    ap.add_argument("--load", type=float, default=1.3, help="offered load of each window (default 1.3)")
    ap.add_argument("--seeds", default="0,1")
    ap.add_argument("--out", default=str(RESULTS))
    a = ap.parse_args()

    from attentived.agents.registry import make_policy
    from attentived.simulator.replay import replay
    from attentived.simulator.samples import sample_path
    from attentived.simulator.trace import Trace, load_trace
    from attentived.topology import uniform
    from attentived.training.gym_env import TraceWindows

    seeds = [int(s) for s in a.seeds.split(",")]
    philly = load_trace(sample_path("philly"))
    sampler = TraceWindows(philly, days=(40.0, 60.0), jobs=(a.jobs, a.jobs), nodes=(a.nodes,), load=(a.load, a.load))
    rng = np.random.default_rng(2024 + a.nodes)
    topo = uniform(a.nodes, 8, nodes_per_switch=4)
    runs: dict[str, list[dict]] = {n: [] for n in a.policy}
    t0 = time.perf_counter()
    for k in range(a.windows):
        trace = Trace(f"philly-heldout-{a.nodes}n-{k}", philly.path, philly.format, tuple(s.job for s in sampler(rng).jobs))
        for seed in seeds:
            t = time.perf_counter()
            result = replay(trace, topo, [make_policy(n, seed=seed) for n in a.policy], seed=seed)
            for n in a.policy:
                runs[n].append({"window": trace.name, "seed": seed, **{m: float(result.runs[n].summary[m]) for m in KEYS}})
            print(f"  {trace.name} seed {seed}: {time.perf_counter() - t:.0f} s", flush=True)
    ref = runs[a.policy[0]]
    summary = {}
    for n, rows in runs.items():
        summary[n] = {m: {"mean": float(np.mean([r[m] for r in rows])),
                          "gmean_ratio": float(math.exp(np.mean([math.log(max(r[m], 1e-9) / max(b[m], 1e-9))
                                                                 for r, b in zip(rows, ref)])))} for m in KEYS}
    doc = {"benchmark": "large_cluster", "held_out_days": [40, 60], "cluster": {"nodes": a.nodes, "gpus": topo.num_gpus},
           "jobs_per_window": a.jobs, "windows": a.windows, "load": a.load, "seeds": seeds, "reference": a.policy[0],
           "seconds": round(time.perf_counter() - t0, 1), "summary": summary, "runs": runs}
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"\n{a.windows} windows x {len(seeds)} seeds, {a.jobs} jobs at load {a.load} on {a.nodes} x 8 GPUs; "
          f"ratios: geometric mean over runs against {a.policy[0]}")
    print(f"{'policy':<48}{'avg JCT h':>10}{'ratio':>7}{'worst user h':>13}{'ratio':>7}{'Jain sd':>8}{'comm GPU-h':>11}{'ratio':>7}")
    for n, s in summary.items():
        print(f"{n:<48}{s['avg_jct']['mean'] / 3600:>10.3f}{s['avg_jct']['gmean_ratio']:>7.3f}"
              f"{s['max_user_wait']['mean'] / 3600:>13.2f}{s['max_user_wait']['gmean_ratio']:>7.3f}"
              f"{s['jain_slowdown']['mean']:>8.3f}{s['comm_cost']['mean'] / 3600:>11.0f}{s['comm_cost']['gmean_ratio']:>7.3f}")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
