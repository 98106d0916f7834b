"""Simulator throughput and memory on the whole Philly dev trace (issue 2's benchmark),
the whole trace from the command line, and a frontier-scale synthetic workload (issue 16).

Each case runs in a fresh child process so its peak RSS (ru_maxrss) is its own:

* the Philly trace (1k, 10k, 50k jobs and all 52,849) on 64 nodes x 8 GPUs under each
  policy of ``POLICIES``, timed inside the process (load, then simulation);
* ``cli``: ``attentived replay --sample philly --nodes 64 --policy fifo``, the whole trace
  from the command line, timed from outside (start-up, load, simulation, metrics, table;
  target < 10 s);
* ``--frontier``: ``FRONTIER_JOBS`` synthetic jobs (`attentived.simulator.synthetic`, load
  0.9, 200 users) on 2,048 nodes x 8 GPUs (16,384 GPUs) under ``FRONTIER_POLICIES``
  (target < 5 minutes and < 2 GB).

Prints a table and writes bench/results/simulator.json.

    .venv/bin/python bench/simulator.py              # Philly table and the CLI run (a few minutes)
    .venv/bin/python bench/simulator.py --quick      # 1k and 10k jobs, and the CLI run
    .venv/bin/python bench/simulator.py --frontier   # also the 16,384-GPU synthetic run
    .venv/bin/python bench/simulator.py --frontier --frontier-jobs 100000   # a smaller one
    .venv/bin/python bench/simulator.py --quick --policy slurm --out slurm.json   # other policies

The ``slurm`` preset (Slurm's own backfill, every job it tests reserving) is the slowest to
replay: docs/simulator.md has its rows.
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
FRONTIER_JOBS = 500_000
FRONTIER_NODES = 2048
FRONTIER_POLICIES = ("sjf+consolidate",)
"""Strict FIFO is left out at this size: its head-of-line blocking lets the queue grow
without bound at load 0.9 (a run was stopped after 9 minutes), so it measures the queue."""


def one(policy: str, max_jobs: int | None, nodes: int, gpus_per_node: int, frontier: bool = False) -> dict:
    """Runs in the child: load, replay, report time and peak memory."""
    import tempfile

    from attentived.agents.registry import make_policy
    from attentived.simulator.engine import Simulation, prepare_jobs
    from attentived.simulator.samples import sample_path
    from attentived.simulator.synthetic import generate, write_trace
    from attentived.simulator.trace import load_trace
    from attentived.topology import uniform

    t0 = time.perf_counter()
    if frontier:
        assert max_jobs is not None
        with tempfile.TemporaryDirectory() as tmp:
            path = write_trace(Path(tmp) / "frontier.csv", generate(max_jobs, nodes * gpus_per_node, 0.9, seed=0, users=200))
            trace = load_trace(path)
    else:
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
    ap.add_argument("--quick", action="store_true", help="only 1k and 10k jobs (and the CLI run)")
    ap.add_argument("--frontier", action="store_true",
                    help=f"also {FRONTIER_JOBS:,} synthetic jobs on {FRONTIER_NODES:,} nodes x 8 GPUs")
    ap.add_argument("--frontier-jobs", type=int, default=FRONTIER_JOBS,
                    help="jobs of the frontier run (a smaller run shows the growth)")
    ap.add_argument("--policy", action="append", default=None,
                    help=f"policy to time (repeat; default {', '.join(POLICIES)})")
    ap.add_argument("--out", type=Path, default=RESULTS, help=f"JSON file to write (default {RESULTS})")
    ap.add_argument("--nodes", type=int, default=64)
    ap.add_argument("--gpus-per-node", type=int, default=8)
    ap.add_argument("--child", nargs=2, metavar=("POLICY", "MAX_JOBS"), help=argparse.SUPPRESS)
    ap.add_argument("--child-frontier", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.frontier_jobs < 1:
        ap.error(f"--frontier-jobs must be at least 1, got {args.frontier_jobs}")
    if args.policy:
        from attentived.agents.registry import BadPolicyName, make_policy

        for name in args.policy:
            try:
                make_policy(name)
            except BadPolicyName as e:
                ap.error(f"--policy: {e}")
    if args.child:
        policy, n = args.child
        print(json.dumps(one(policy, None if n == "all" else int(n), args.nodes, args.gpus_per_node, args.child_frontier)))
        return
    sizes = SIZES[:2] if args.quick else SIZES
    rows = []

    def child(policy: str, n: int | None, nodes: int, frontier: bool = False) -> None:
        out = subprocess.run(
            [sys.executable, __file__, "--nodes", str(nodes), "--gpus-per-node", str(args.gpus_per_node),
             "--child", policy, "all" if n is None else str(n)] + (["--child-frontier"] if frontier else []),
            check=True, capture_output=True, text=True,
        )
        row = json.loads(out.stdout.strip().splitlines()[-1])
        row["workload"] = f"synthetic on {nodes} x {args.gpus_per_node}" if frontier else "philly"
        rows.append(row)
        print(f"{row['workload']:<24} {row['policy']:<18} {row['jobs']:>7} jobs  sim {row['sim_s']:7.2f} s  "
              f"{row['jobs_per_s']:9.0f} jobs/s  load {row['load_s']:5.2f} s  "
              f"decisions {row['decisions']:>7}  peak RSS {row['peak_rss_mb']:6.0f} MB", flush=True)

    for policy in args.policy or POLICIES:
        for n in sizes:
            child(policy, n, args.nodes)
    cli = ["attentived", "replay", "--sample", "philly", "--nodes", str(args.nodes), "--policy", "fifo"]
    t0 = time.perf_counter()
    subprocess.run([str(Path(sys.executable).with_name("attentived")), *cli[1:]], check=True, capture_output=True)
    cli_s = time.perf_counter() - t0
    print(f"{' '.join(cli)}: {cli_s:.1f} s wall (target < 10 s)", flush=True)
    if args.frontier:
        for policy in FRONTIER_POLICIES:
            child(policy, args.frontier_jobs, FRONTIER_NODES, frontier=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    doc = {
        "benchmark": "simulator",
        "cluster": f"{args.nodes} nodes x {args.gpus_per_node} GPUs",
        "machine": {"python": platform.python_version(), "cpu": platform.processor() or platform.machine()},
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "rows": rows,
        "cli": {"command": " ".join(cli), "wall_s": cli_s, "target_s": 10.0},
    }
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
