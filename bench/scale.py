"""Frontier scale (issue 16): one decision, one plan and one daemon cycle at 16,384 GPUs.

On one core (``torch.set_num_threads(1)``, and the process pinned to one CPU where the OS
allows), with the shipped attentive model:

* ``choose``: one decision (features, job agent, candidate placements, GPU agent) on a
  steady-state snapshot: ``--gpus`` GPUs as ``uniform(gpus / 8, 8)`` (4 nodes per leaf
  switch), 97% of them busy with running jobs whose limits end over the next days, and
  ``--pending`` pending jobs with the Philly mix of sizes and limits, 12 users
  (`bench/agents_latency.py`'s ``random_state``). Target p99 < 50 ms.
* ``plan``: the whole plan (``decide``) on such snapshots: every job the agents start at
  that instant, plus the ranking and the hold. Target p99 < 1,000 ms. The same for
  ``sjf+consolidate`` with and without ``pack=1`` (``other_plan_ms``).
* ``cycle``: the daemon's whole cycle (snapshot, decide, apply) against stand-in Slurm
  commands that serve JSON of that size in the recorded fixtures' shapes, for Slurm
  22.05 and 24.11 (`bench/slurm_scale.py`). Target p99 < 5 s.

``--kept-off N`` keeps every pending job off the first N nodes, as an active reservation of
someone else's does (daemon/others_reservations.py): then no job takes the decision core's
fast path for plain requests. ``--blocks N`` gives the cluster Slurm's block topology (base
blocks of N nodes in node order, ``BlockSizes`` N, 2N, 4N and 8N; docs/daemon.md, "Block
topologies"): every job's GPUs are then cut to one block's part (`Fit.usable`).

Prints a table; the last stdout line is a JSON object with ``choose_p99_ms``,
``plan_p99_ms`` and ``cycle_p99_s`` (and the rest); ``--json`` also writes it to
bench/results/scale.json (scale_kept_off.json with ``--kept-off``, scale_blocks.json with
``--blocks``).

    .venv/bin/python bench/scale.py --gpus 16384 --pending 10000 --json
    .venv/bin/python bench/scale.py --gpus 1024 --pending 1000 --skip-cycle   # the issue-3 size
    .venv/bin/python bench/scale.py --kept-off 8 --skip-cycle   # with a reservation in the way
    .venv/bin/python bench/scale.py --blocks 9 --skip-cycle     # blocks of 9 nodes (72 GPUs)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).parent))

from agents_latency import random_state  # noqa: E402

RESULTS = Path(__file__).parent / "results" / "scale.json"
BUSY_SHARE = 0.97


def stats(xs: list[float]) -> dict[str, float]:
    a = np.asarray(xs, dtype=float)
    return {"p50": float(np.percentile(a, 50)), "p99": float(np.percentile(a, 99)), "max": float(a.max()), "n": len(a)}


def one_core() -> str:
    """Pin this process to one CPU (what "on one core" means here), if the OS allows."""
    torch.set_num_threads(1)
    try:
        cpu = min(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpu})
        return f"pinned to CPU {cpu}"
    except (AttributeError, OSError):
        return "not pinned (no sched_setaffinity)"


def measure_agents(gpus: int, pending: int, states: int, plans: int, seed: int, kept_off: int = 0,
                   blocks: int = 0) -> dict[str, Any]:
    from attentived.agents.attentive import AttentivePolicy
    from attentived.agents.learned import load_learned
    from attentived.topology import uniform
    from attentived.topology.blocks import Blocks

    policy = load_learned("attentive", None)
    assert isinstance(policy, AttentivePolicy)
    topo = uniform(gpus // 8, 8, nodes_per_switch=4)
    if blocks:
        names = [n.name for n in topo.nodes]
        members = [names[i:i + blocks] for i in range(0, len(names), blocks)]
        topo = replace(topo, blocks=Blocks.of([f"b{k}" for k in range(len(members))], members,
                                              [blocks << k for k in range(4)]))
    rng = np.random.default_rng(seed)
    t0 = time.perf_counter()
    snapshots = [random_state(rng, topo, pending=pending, busy_share=BUSY_SHARE) for _ in range(max(states, plans))]
    if kept_off:
        nodes = tuple(n.name for n in topo.nodes[:kept_off])
        snapshots = [replace(s, pending=tuple(replace(p, exclude=(*p.exclude, *nodes)) for p in s.pending))
                     for s in snapshots]
    built = time.perf_counter() - t0
    policy.choose(snapshots[0])  # warm-up: lazy caches (speed model, topology arrays)
    choose_ms = []
    for s in snapshots[:states]:
        t0 = time.perf_counter()
        policy.choose(s)
        choose_ms.append((time.perf_counter() - t0) * 1e3)
    plan_ms, starts = time_plans(policy, snapshots[:plans])
    return {"choose_ms": stats(choose_ms), "plan_ms": plan_ms, "starts_per_plan": starts,
            "snapshot_build_s": built / max(states, plans),
            "other_plan_ms": {name: time_other(name, snapshots[:plans]) for name in OTHER_POLICIES}}


OTHER_POLICIES = ("sjf+consolidate", "sjf+consolidate:pack=1")
"""Plans of other policies on the same snapshots: the packing rule walks the queue and
its hold with a placement per candidate, where a plain heuristic counts GPUs."""


def time_plans(policy: Any, snapshots: list[Any]) -> tuple[dict[str, float], float]:
    """``policy``'s whole plan on each snapshot: the times' `stats` and the mean starts."""
    ms, starts = [], []
    for s in snapshots:
        t0 = time.perf_counter()
        plan = policy.decide(s)
        ms.append((time.perf_counter() - t0) * 1e3)
        starts.append(len(plan.starts))
    return stats(ms), float(np.mean(starts))


def time_other(name: str, snapshots: list[Any]) -> dict[str, float]:
    """`time_plans` of policy ``name`` after one plan to warm it up."""
    from attentived.agents.registry import make_policy

    policy = make_policy(name)
    policy.decide(snapshots[0])
    return time_plans(policy, snapshots)[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpus", type=int, default=16384, help="cluster size, a multiple of 32 (8 GPUs per node)")
    ap.add_argument("--pending", type=int, default=10000)
    ap.add_argument("--states", type=int, default=30, help="snapshots timed for one decision")
    ap.add_argument("--plans", type=int, default=10, help="snapshots timed for a whole plan")
    ap.add_argument("--cycles", type=int, default=5, help="steady daemon cycles per Slurm version")
    ap.add_argument("--skip-cycle", action="store_true", help="agents only (no daemon cycle)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--kept-off", type=int, default=0, metavar="N",
                    help="keep every pending job off the first N nodes (an active reservation of someone else's)")
    ap.add_argument("--blocks", type=int, default=0, metavar="N",
                    help="Slurm's block topology: base blocks of N nodes (BlockSizes N, 2N, 4N, 8N)")
    ap.add_argument("--json", action="store_true", help="also write bench/results/scale.json")
    args = ap.parse_args()
    if args.gpus % 32 or args.gpus <= 0:
        ap.error(f"--gpus must be a positive multiple of 32 (8 GPUs per node, 4 nodes per switch), got {args.gpus}")
    if args.pending < 1:
        ap.error(f"--pending must be at least 1, got {args.pending}")
    if not 0 <= args.kept_off < args.gpus // 8:
        ap.error(f"--kept-off must be from 0 to {args.gpus // 8 - 1} nodes, got {args.kept_off}")

    pinned = one_core()
    print(f"{args.gpus:,} GPUs, {args.pending:,} pending, {BUSY_SHARE:.0%} busy; one thread, {pinned}", file=sys.stderr)
    if args.blocks < 0:
        ap.error(f"--blocks must be a number of nodes, got {args.blocks}")
    agents = measure_agents(args.gpus, args.pending, args.states, args.plans, args.seed, args.kept_off, args.blocks)
    doc: dict[str, Any] = {
        "benchmark": "scale",
        "gpus": args.gpus,
        "pending": args.pending,
        "busy_share": BUSY_SHARE,
        "kept_off_nodes": args.kept_off,
        "block_nodes": args.blocks,
        "one_core": pinned,
        "machine": {"python": platform.python_version(), "torch": torch.__version__, "cpus": os.cpu_count()},
        **agents,
        "choose_p99_ms": agents["choose_ms"]["p99"],
        "plan_p99_ms": agents["plan_ms"]["p99"],
    }
    print(f"{'one decision (choose)':<28} p50 {agents['choose_ms']['p50']:8.1f} ms   p99 {agents['choose_ms']['p99']:8.1f} ms"
          f"   (target p99 < 50 ms)")
    print(f"{'whole plan (decide)':<28} p50 {agents['plan_ms']['p50']:8.1f} ms   p99 {agents['plan_ms']['p99']:8.1f} ms"
          f"   (target p99 < 1,000 ms; {agents['starts_per_plan']:.0f} starts per plan)")
    for name, t in agents["other_plan_ms"].items():
        print(f"{'plan, ' + name:<28} p50 {t['p50']:8.1f} ms   p99 {t['p99']:8.1f} ms   (target p99 < 1,000 ms)")
    if not args.skip_cycle:
        from slurm_scale import measure_cycles

        cycles = {v: measure_cycles(v, args.gpus, args.pending, args.cycles, "attentive") for v in ("22.05", "24.11")}
        doc["cycle"] = cycles
        doc["cycle_p99_s"] = max(c["cycle_p99_s"] for c in cycles.values())
        for v, c in cycles.items():
            print(f"{'daemon cycle, Slurm ' + v:<28} p99 {c['cycle_p99_s']:8.2f} s    (target p99 < 5 s)")
    doc["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{'peak memory':<28} {doc['peak_rss_mb']:8.0f} MB   (target < 2,048 MB)")
    if args.json:
        out = RESULTS.with_name("scale_kept_off.json" if args.kept_off else "scale_blocks.json" if args.blocks
                                else RESULTS.name)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(doc, indent=2) + "\n")
        print(f"wrote {out}", file=sys.stderr)
    print(json.dumps(doc))


if __name__ == "__main__":
    main()
