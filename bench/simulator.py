"""Simulator throughput and memory on the whole Philly dev trace (issue 2's benchmark).

Each case runs in a fresh child process so its peak RSS (ru_maxrss) is its own. Prints a
table and writes bench/results/simulator.json.

    .venv/bin/python bench/simulator.py            # the full table (about a minute or two)
    .venv/bin/python bench/simulator.py --quick    # 1k and 10k jobs only
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).parent / "results" / "simulator.json"
POLICIES = ("fifo+first-fit", "sjf+consolidate")
SIZES = (1_000, 10_000, 50_000, None)  # None = the whole trace (52,849 jobs)


def one(policy: str, max_jobs: int | None, nodes: int, gpus_per_node: int) -> dict:
    """Runs in the child: load, replay, report time and peak memory."""
    from attentived.agents.registry import make_policy
    from attentived.simulator.engine import Simulation, prepare_jobs
    from attentived.simulator.samples import sample_path
    from attentived.simulator.trace import load_trace
    from attentived.topology import uniform

    t0 = time.perf_counter()
    trace = load_trace(sample_path("philly"), max_jobs=max_jobs)
    topo = uniform(nodes, gpus_per_node)
    jobs = prepare_jobs(trace.jobs, seed=0)
    t1 = time.perf_counter()
    result = Simulation(jobs, topo, make_policy(policy)).run()
    t2 = time.perf_counter()
    return {
        "policy": policy,
        "jobs": len(result.records),
        "load_s": t1 - t0,
        "sim_s": t2 - t1,
        "jobs_per_s": len(result.records) / (t2 - t1),
        "decisions": result.decisions,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="only 1k and 10k jobs")
    ap.add_argument("--nodes", type=int, default=64)
    ap.add_argument("--gpus-per-node", type=int, default=8)
    ap.add_argument("--child", nargs=2, metavar=("POLICY", "MAX_JOBS"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        policy, n = args.child
        print(json.dumps(one(policy, None if n == "all" else int(n), args.nodes, args.gpus_per_node)))
        return
    sizes = SIZES[:2] if args.quick else SIZES
    rows = []
    for policy in POLICIES:
        for n in sizes:
            out = subprocess.run(
                [sys.executable, __file__, "--nodes", str(args.nodes), "--gpus-per-node", str(args.gpus_per_node),
                 "--child", policy, "all" if n is None else str(n)],
                check=True, capture_output=True, text=True,
            )
            row = json.loads(out.stdout.strip().splitlines()[-1])
            rows.append(row)
            print(f"{row['policy']:<18} {row['jobs']:>7} jobs  sim {row['sim_s']:7.2f} s  "
                  f"{row['jobs_per_s']:9.0f} jobs/s  load {row['load_s']:5.2f} s  "
                  f"decisions {row['decisions']:>7}  peak RSS {row['peak_rss_mb']:6.0f} MB", flush=True)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    doc = {
        "benchmark": "simulator",
        "cluster": f"{args.nodes} nodes x {args.gpus_per_node} GPUs",
        "machine": {"python": platform.python_version(), "cpu": platform.processor() or platform.machine()},
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "rows": rows,
    }
    RESULTS.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
